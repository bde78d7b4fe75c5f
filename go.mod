module github.com/hotcell/hotcell

go 1.26.8

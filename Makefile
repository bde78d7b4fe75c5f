# Thin wrappers; scripts/serve and scripts/test are the real entry points.
.PHONY: build test serve bench

build:
	mkdir -p bin
	CGO_ENABLED=0 go build -trimpath -o bin/hotcell ./cmd/hotcell
	CGO_ENABLED=0 go build -trimpath -o bin/hotcell-agent ./cmd/hotcell-agent

test:
	scripts/test

serve:
	scripts/serve

bench:
	go test -run '^$$' -bench . -benchtime=1x ./bench/

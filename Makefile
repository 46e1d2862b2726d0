# Everyday commands. Set SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN to run
# the database-backed parts against PostgreSQL and MySQL/MariaDB too.
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test nocgo lint bench fuzz tidy-check ci

test:
	go test -race -count=1 ./...

# Everything builds without cgo; SQLite then reports that it needs it.
nocgo:
	CGO_ENABLED=0 go build ./...
	CGO_ENABLED=0 go vet ./...
	CGO_ENABLED=0 go test -count=1 -run 'Cgo|SQLiteAvailability' ./internal/dialect/ ./session/ ./election/

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

bench:
	go test -run '^$$' -bench . -benchtime 2000x ./election/

fuzz:
	go test -run '^$$' -fuzz FuzzOpen -fuzztime 60s ./session/
	go test -run '^$$' -fuzz FuzzNamespace -fuzztime 60s ./election/

tidy-check:
	go mod tidy
	git diff --exit-code go.mod go.sum

ci:
	bash .ci/run

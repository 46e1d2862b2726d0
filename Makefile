# Everyday commands. Set SQLELECT_POSTGRES_DSN and SQLELECT_MYSQL_DSN to run
# the database-backed parts against PostgreSQL and MySQL/MariaDB too.
STATICCHECK_VERSION ?= v0.8.2

.PHONY: test test-modules nocgo lint bench bench-core bench-tidb bench-scale test-tidb fuzz tidy-check ci release release-check release-modules

# Nested modules with their own go.mod (not covered by ./... at the root).
MODULES = prometheus gocron otel

test:
	go test -race -count=1 ./...

test-modules:
	for m in $(MODULES); do (cd $$m && go vet ./... && go test -race -count=1 ./...) || exit 1; done

# Everything builds without cgo; SQLite then reports that it needs it.
nocgo:
	CGO_ENABLED=0 go build ./...
	CGO_ENABLED=0 go vet ./...
	CGO_ENABLED=0 go test -count=1 -run 'Cgo|SQLiteAvailability' ./internal/dialect/ ./session/ ./election/

lint:
	gofmt -l . | tee /dev/stderr | (! read)
	go vet ./...
	go run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) ./...

# The protocol's benchmarks on SQLite, and on PostgreSQL and MySQL/MariaDB
# when their DSNs are set, then the same on TiDB (bench-tidb).
bench: bench-core bench-tidb

# BenchmarkIdleLeader's iterations are intervals of a 2 s lease: 15 of them.
BENCH = go test -run '^$$' -bench 'Protocol|RunToLeading' -benchtime 2000x ./election/ && \
	go test -run '^$$' -bench IdleLeader -benchtime 15x ./election/

bench-core:
	$(BENCH)

# TiDB: a server of our own on 14000 (internal/ci/tidb.sh builds it once
# per machine), the mysql target pointed at it.
TIDB_DSN = mysql://root@tcp(127.0.0.1:14000)/test

test-tidb:
	internal/ci/tidb.sh start
	SQLELECT_TEST_ONLY=mysql SQLELECT_MYSQL_DSN='$(TIDB_DSN)' SQLELECT_EXPECT_TIDB=1 go test -race -count=1 ./election/ ./migrate/ ./internal/dialect/; \
	  rc=$$?; internal/ci/tidb.sh stop; exit $$rc

bench-tidb:
	internal/ci/tidb.sh start
	export SQLELECT_TEST_ONLY=mysql SQLELECT_MYSQL_DSN='$(TIDB_DSN)' SQLELECT_EXPECT_TIDB=1; $(BENCH); \
	  rc=$$?; internal/ci/tidb.sh stop; exit $$rc

# Groups at scale: 1 to 1,000 namespaces, 2 to 32 candidate processes, with
# and without balancing (docs/performance.md), and the plots of the
# statements per process per interval in docs/. Needs SQLELECT_POSTGRES_DSN
# and SQLELECT_MYSQL_DSN; about 10 minutes per database.
bench-scale:
	go run ./internal/cmd/sqlelect-scale -db postgres -namespaces 1,16,128,1000 -procs 2,8,32 -steady 10s -plot docs/scale-postgres.svg
	go run ./internal/cmd/sqlelect-scale -db mysql -namespaces 1,16,128,1000 -procs 2,8,32 -steady 10s -plot docs/scale-mysql.svg
	go run ./internal/cmd/sqlelect-scale -db sqlite -namespaces 1,16,128 -procs 2,8 -steady 10s -plot docs/scale-sqlite.svg
	go run ./internal/cmd/sqlelect-scale -db postgres -namespaces 128,1000 -procs 8 -balance on -steady 20s -overload-latency 400ms -overload-for 10s
	go run ./internal/cmd/sqlelect-scale -db postgres -namespaces 128,1000 -procs 8 -balance on -steady 20s -overload-stall 1800ms

fuzz:
	go test -run '^$$' -fuzz FuzzOpen -fuzztime 60s ./session/
	go test -run '^$$' -fuzz FuzzNamespace -fuzztime 60s ./election/

tidy-check:
	go mod tidy
	for m in $(MODULES) internal/release; do (cd $$m && go mod tidy) || exit 1; done
	git diff --exit-code go.mod go.sum $(addsuffix /go.mod,$(MODULES) internal/release) $(addsuffix /go.sum,$(MODULES) internal/release)

# Releases: docs/releasing.md. VERSION names and stamps the binaries; by
# default git describe's name for the checkout (the nearest core tag and
# the commits since, or the commit).
VERSION ?= $(shell git describe --tags --match 'v[0-9]*' --always --dirty 2>/dev/null || echo dev)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64
DIST ?= dist
RELEASE = go -C internal/release run .

# The sqlelect command for every platform in DIST: static (no cgo), the
# version stamped, paths trimmed, named sqlelect_<version>_<os>_<arch>[.exe],
# with SHA256SUMS beside them.
release:
	mkdir -p $(DIST)
	rm -f $(DIST)/sqlelect_* $(DIST)/SHA256SUMS
	for p in $(PLATFORMS); do \
	  os=$${p%/*}; arch=$${p#*/}; ext=; if [ $$os = windows ]; then ext=.exe; fi; \
	  out=$(DIST)/sqlelect_$(VERSION)_$${os}_$${arch}$$ext; echo "$$out"; \
	  CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOAMD64=v1 GOARM64=v8.0 go build -trimpath -buildvcs=auto \
	    -ldflags "-s -w -X main.version=$(VERSION)" -o $$out ./cmd/sqlelect || exit 1; \
	done
	$(RELEASE) sums $(abspath $(DIST))

# make release, then check it: every file and its sum, each binary's format,
# architecture and build settings, `sqlelect version` (once the command has
# it), and the same bytes built again from a fresh clone at another path.
release-check: release
	$(RELEASE) dist -version $(VERSION) $(abspath $(DIST))
	$(RELEASE) reproduce -version $(VERSION) $(abspath $(DIST))

# The modules: the nested modules require the version a release tags, and a
# scratch module outside the repository, with no replace and no workspace,
# gets and runs every module at that version through a file module proxy
# made from HEAD.
release-modules:
	$(RELEASE) check
	$(RELEASE) outside

ci:
	bash .ci/run

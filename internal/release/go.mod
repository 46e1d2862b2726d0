module github.com/sqlelect/sqlelect/internal/release

go 1.23.0

require golang.org/x/mod v0.26.0

package v1

// The CEL rules between a "+gen-api:begin=BLOCK" and a "+gen-api:end" line of this package are written by
// hack/gen-api from Go tables (the builders' reserved names and ports, its own immutableWhileRunning): change
// the tables, not the lines, and run make generate.
//go:generate go run ../../hack/gen-api

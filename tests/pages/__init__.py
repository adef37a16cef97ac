"""The pages' tests: docs examples, notebooks, the demo, tables and the benchmarks' smoke runs."""

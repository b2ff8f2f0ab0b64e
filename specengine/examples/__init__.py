"""Example models compiled by the demo, the tests and the benchmarks."""

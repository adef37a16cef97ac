"""The statistics' tests: running moments, sums, precision, moving statistics, kernels, devices."""

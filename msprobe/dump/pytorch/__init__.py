"""PyTorch side of the dump: capture (function mode + patches), statistics, md5, .pt files, service."""

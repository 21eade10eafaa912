"""gRPC stubs generated from protos/ by ``make protos``: never edit them by hand."""

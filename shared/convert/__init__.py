"""The Convert helper (spec 4.17): PDF merging over gRPC, its server and its client."""

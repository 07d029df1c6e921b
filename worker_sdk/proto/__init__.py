"""Generated protobuf and gRPC code (do not edit; run protos/generate.py)."""

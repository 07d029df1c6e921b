"""gRPC transport: servicers (thin), interceptors, wire conversions, server start/stop."""

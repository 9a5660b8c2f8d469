"""Who is calling (authentication) and what they may do (queue permissions), for REST and gRPC alike."""

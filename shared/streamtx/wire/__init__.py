"""Wire formats shared by the services and the SDK (pure encoders and decoders, no I/O)."""

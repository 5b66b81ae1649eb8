"""The layernorm op for BOO: not built yet; this distribution registers no op."""

"""fleet: bare-metal fleet launcher for LLM inference."""

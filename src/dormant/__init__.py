"""dormant: very many long-lived LLM agent sessions, memory bounded by work in flight."""

"""Dialog: NLU, knowledge base, retrieval, LLM client and the dialog manager."""

"""Text embeddings: one vector per request, computed once, shared by the cache and the router."""

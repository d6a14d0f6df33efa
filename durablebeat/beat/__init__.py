"""The beat loop and its database side: what is due, who fires it, what went out."""

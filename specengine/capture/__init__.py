"""The Python frontend: runs the user's code on proxies; every Python-semantics rule. May import `prologue`,
`executors`, `ops`, `ir`, `marks`, `constraints` and the leaves; never `cache` or `api`."""

"""Pure statistics: latency samples (`stats`), change points in a history (`changepoints`), and the
search of a bisection (`bisect_search`). Functions of numbers, no database: the store, the dispatcher
and the benches call them."""

"""HTTP routes of the coordinator: the transaction API and the admin v3 API."""

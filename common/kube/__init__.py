"""The API server read as plain JSON: `read` (lists page by page, watch events of any length,
`ApiError`), `listwatch` (the one list+watch loop every cache of API objects runs on) and
`errors` (what an API error body says: its reason, its Retry-After)."""

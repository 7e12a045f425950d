module topoplace.io/e2e/barewebhook

go 1.26.0

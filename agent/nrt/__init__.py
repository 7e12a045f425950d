"""Free capacity per NUMA node: the agent's NodeResourceTopology publisher.

`zones` and `body` compute the object from the kubelet's PodResources answers (pure),
`snapshot` reads them, `client` talks to the API server, `publisher` decides when to write.
"""

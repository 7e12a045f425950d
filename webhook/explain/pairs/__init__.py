"""GPU↔NIC pairs: are the ones a policy asks for guaranteed on a node's path?

`facts` (partners and RDMA resources per NUMA node, from the agent's topology annotation) and
`verdict` (the kubelet's device-plugin path and DRA judged from them; pure).
"""

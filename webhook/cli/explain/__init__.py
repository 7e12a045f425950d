"""`explain`: why a pod or workload fits a node or not (command.py), its per-domain view for a
workload under keepTogether (workload.py), and the kubectl plugin's variant (kubectl.py)."""

"""The webhook's benchmarks: the server under wrk next to the bare TLS floor (`bench_webhook`),
the engine (`bench_engine`), the node cache's no-fit check (`bench_node_cache`), bounded work
(`bench_bounded`), and the miss path taken apart (`profile_miss`, `breakdown_miss` with its
child `breakdown_server`); `workload` makes the pods and reviews, `apiserver_stub` the fleet."""

"""Generated code for the kubelet's PodResources API (`v1.PodResourcesLister`): do not edit.

`api.proto` is the published k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (v0.37.2),
verbatim; newer releases carry no gogoproto options, older ones are generated with their
`gogoproto` import and options stripped. `api_pb2*.py(i)` come from it with grpcio-tools:

    python -m tests.agent.audit.stubs            # regenerate in place

tests/agent/audit/test_stubs.py keeps them in step: the committed descriptor must equal what
protoc makes of `api.proto`, and `api.proto` must equal the Go module's copy when the module
cache has it.
"""

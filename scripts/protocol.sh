#!/bin/sh
# Regenerate the Python code of the party protocol (src/fedstream/deploy/protocol.proto) after
# editing it: protocol_pb2.py, protocol_pb2.pyi and protocol_pb2_grpc.py, checked in next to it.
# Needs grpcio-tools (pip install 'fedstream[proto]'); its protoc must generate code the pinned
# protobuf accepts (pyproject: grpcio-tools 1.81.x with protobuf 6.33.x).
set -e
cd "$(dirname "$0")/.."
python -m grpc_tools.protoc -I src --python_out=src --pyi_out=src --grpc_python_out=src \
    src/fedstream/deploy/protocol.proto

"""Generated stubs of surreal.v1 (scripts/gen_protos.sh); do not edit the *_pb2* files."""

"""What the multi-process torch.distributed tests share: the skip where gloo is missing, and a
free port on the loopback interface for the store."""
import socket

import pytest
import torch.distributed

needs_gloo = pytest.mark.skipif(
    not (torch.distributed.is_available() and torch.distributed.is_gloo_available()),
    reason="torch.distributed with gloo is not available")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

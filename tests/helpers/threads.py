"""``one_torch_thread``: a module-scoped, autouse fixture; a test module that imports it runs
on one torch thread (tiny models run fastest so, and the CI machine has two shared cores)."""

import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _many_entries():
    """Op sweeps under dynamic=False compile one entry per shape on purpose: lift the default limit of 8.

    Tests of the limit itself pass `recompile_limit=` or set the config inside the test.
    """
    import specengine

    old = specengine.config.recompile_limit
    specengine.config.recompile_limit = 1000
    yield
    specengine.config.recompile_limit = old


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: intra-op threads only spin on a loaded machine (2 threads: ~1 s per eager call, 1: ~2 ms)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)

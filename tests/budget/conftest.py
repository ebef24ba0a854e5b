import pytest
from inspect_ai.model._model_info import clear_model_info_cache


@pytest.fixture(autouse=True)
def _fresh_model_info() -> None:
    # prices are process-global: each test registers the ones it uses
    clear_model_info_cache()

"""A small offline question set for the examples."""

from inspect_ai.dataset import MemoryDataset, Sample

QUESTIONS = MemoryDataset(
    [
        Sample(id="product", input="What is 6 times 7? Answer with the number only.", target="42"),
        Sample(id="sum", input="What is 19 plus 23? Answer with the number only.", target="42"),
        Sample(
            id="power",
            input="What is 2 to the power 10? Answer with the number only.",
            target="1024",
        ),
    ],
    name="questions",
)

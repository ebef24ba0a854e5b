"""Names a newcomer has not met are explained where they appear."""

import re

from .pages import DOCS


def test_every_page_that_names_maritime_says_or_links_what_it_is() -> None:
    for page in sorted(DOCS.glob("*.md")):
        text = page.read_text()
        if re.search(r"maritime", text, flags=re.I):
            explains = "*Maritime* is the hosted service" in text
            assert explains or "server.md#words" in text, page.name


def test_the_mcp_section_names_the_run_parameter() -> None:
    text = (DOCS / "server.md").read_text()
    mcp = text[text.index("## MCP") :]
    assert "`swarm_id`" in mcp.split("##")[1]

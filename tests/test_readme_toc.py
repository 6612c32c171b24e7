"""README.md's table of contents is current (tests/readme_toc.py) and its in-page links land."""

import re

import readme_toc  # the script beside this test (tests/ is on the path, as for conftest)


def test_the_table_of_contents_is_current():
    text = readme_toc.README.read_text(encoding="utf-8")
    assert readme_toc.with_toc(text) == text, "run: python tests/readme_toc.py --write"
    assert readme_toc.main([]) == 0


def test_a_new_heading_makes_it_stale_and_anchors_follow_github():
    text = readme_toc.README.read_text(encoding="utf-8") + "\n## A new `section`: here\n"
    assert readme_toc.with_toc(text) != text and "- [A new section: here](#a-new-section-here)" in readme_toc.toc(text)
    seen: dict[str, int] = {}
    assert [readme_toc.anchor(t, seen) for t in ("Speed", "Speed", "H = (H0, T, K)")] == [
        "speed", "speed-1", "h--h0-t-k"
    ]  # fmt: skip


def test_every_in_page_link_lands_on_a_heading():
    text = readme_toc.README.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    anchors = {readme_toc.anchor(title, seen) for _, title in readme_toc.headings(text)}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links and links - anchors == set()

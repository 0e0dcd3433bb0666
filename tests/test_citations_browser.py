"""Checked citations and /sent in a real browser (Playwright driving /usr/bin/chromium, as test_web_browser.py): a
citation that holds opens its note at the lines cited; one that does not is marked with its reason."""


from conftest import call
from test_web_browser import answered, ask, browser, open_page  # noqa: F401  (fixtures)



def test_a_good_citation_opens_its_lines_and_a_bad_one_is_marked_with_its_reason(open_page, kb, fake_llm):
    (kb / "long.md").write_text("# Long\n\n" + "".join(f"line {n}\n" for n in range(3, 301)), encoding="utf-8")
    fake_llm.replies += [call("read_note", file_path="long.md", start_line=140),
                         {"content": 'It says "line 150" (long.md:150-151); also long.md:999 and ghost.md:2.'}]
    page = open_page(width=390)  # a phone: the reason must come with a tap too, not only on hover
    ask(page, "what does line 150 say?")
    bad = page.wait_for_selector(".msg.answer .cite.bad:has-text('long.md:999')")
    answered(page)
    assert bad.get_attribute("title") == "the note has 300 lines"
    bad.click()
    assert "open" in bad.get_attribute("class")  # shows " — the note has 300 lines" after it
    assert page.locator(".msg.answer .cite.bad").all_inner_texts() == ["long.md:999", "ghost.md:2"]
    assert page.locator(".msg.answer .cite.bad").nth(1).get_attribute("title") == "no such note"

    page.click(".msg.answer a.cite:has-text('long.md:150-151')")
    cited = page.wait_for_selector("#side-body pre.source .line.cited")
    assert page.locator("#side-body .line.cited").all_inner_texts() == ["line 150", "line 151"]
    assert cited.get_attribute("data-n") == "150"
    in_view = page.evaluate("""() => {
        const line = document.querySelector('#side-body .line.cited').getBoundingClientRect();
        const box = document.querySelector('#side-body').getBoundingClientRect();
        return line.top >= box.top && line.bottom <= box.bottom && document.querySelector('#side-body').scrollTop > 0;
    }""")
    assert in_view
    page.click("#side-body a:has-text('show it formatted')")
    page.wait_for_selector("#side-body h1:has-text('Long')")

    page.reload()  # the saved conversation is checked again and marked the same way
    page.wait_for_selector(".msg.answer .cite.bad:has-text('ghost.md:2')")
    assert page.locator(".msg.answer a.cite").all_inner_texts() == ["long.md:150-151"]


def test_an_answer_about_the_notes_with_none_read_says_so_under_it(open_page, fake_llm):
    fake_llm.replies.append({"content": 'Your notes say "@wraps keeps names" in python-decorators.md.'})
    page = open_page()
    ask(page, "what do my notes say about decorators?")
    page.wait_for_selector(".msg.answer .notice.warn:has-text('No note was read for this answer')")
    assert page.get_attribute(".msg.answer .cite.bad", "title") == "no such note"


def test_the_sent_button_shows_what_left_this_machine(open_page):
    page = open_page()
    ask(page, "find my vim notes")
    page.wait_for_selector(".msg.answer a.cite")  # the demo model cites the lines it read
    answered(page)
    page.click("#sent")
    report = page.wait_for_selector("#side-body pre.sent-report")
    assert "nothing left the machine" in report.inner_text() and "vim.md  lines 1-4" in report.inner_text()
    page.click("#side-body a:has-text('Every conversation about these notes')")
    page.wait_for_selector("#side-body pre.sent-report:has-text('What every conversation about')")

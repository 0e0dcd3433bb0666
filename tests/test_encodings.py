"""Notes in legacy encodings through the real tools: GBK/GB18030 and UTF-16 with a BOM are read, searched
and changed in their own encoding, byte for byte; what cannot be kept is refused and left alone."""

import codecs

import pytest
from conftest import make_notebook, run_tool

import versions

NOTE = "# 会议记录\r\n\r\n决定：十二月发布猕猴桃搜索。\r\nAction: Bob\r\n"
ENCODINGS = {  # name -> (bytes of the BOM, codec)
    "gbk": (b"", "gbk"),
    "utf-16-le": (codecs.BOM_UTF16_LE, "utf-16-le"),
    "utf-16-be": (codecs.BOM_UTF16_BE, "utf-16-be"),
}


@pytest.fixture
def folder(tmp_path):
    kb = tmp_path / "notes"
    kb.mkdir()
    return kb.resolve(), make_notebook(kb.resolve())


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_legacy_note_is_read_searched_and_changed_in_its_own_encoding(folder, name):
    kb, notebook = folder
    bom, codec = ENCODINGS[name]

    def encoded(text: str) -> bytes:
        return bom + text.encode(codec)

    path = kb / "会议.md"
    path.write_bytes(encoded(NOTE))

    read = run_tool(notebook, "read_note", file_path="会议.md")
    assert "决定：十二月发布猕猴桃搜索。" in read and "Action: Bob" in read
    found = run_tool(notebook, "search_notes", query="猕猴桃")
    assert "会议.md" in found and "十二月发布猕猴桃搜索" in found

    run_tool(notebook, "edit_note", file_path="会议.md", old_text="十二月", new_text="一月")
    edited = NOTE.replace("十二月", "一月")
    assert path.read_bytes() == encoded(edited)
    run_tool(notebook, "append_note", file_path="会议.md", content="补充：周五复盘")
    appended = edited + "补充：周五复盘\r\n"
    assert path.read_bytes() == encoded(appended)
    assert "决定：一月发布" in run_tool(notebook, "search_notes", query="一月")
    assert "补充：周五复盘" in run_tool(notebook, "search_notes", query="复盘")

    run_tool(notebook, "write_note", file_path="会议.md", content="# 新的\n全部重写\n", overwrite=True)
    assert path.read_bytes() == encoded("# 新的\r\n全部重写\r\n")

    for before in (appended, edited, NOTE):
        assert "Undid" in notebook.undo()[0]
        assert path.read_bytes() == encoded(before)
    assert [p.read_bytes() for p in versions.list_versions(kb, "会议.md")][0] == encoded(NOTE)


def test_text_a_gbk_note_cannot_hold_is_refused_and_the_note_left_alone(folder):
    kb, notebook = folder
    path = kb / "todo.txt"
    path.write_bytes("待办：买菜\n".encode("gbk"))
    for tool, args in [("edit_note", {"old_text": "买菜", "new_text": "买菜 😀"}),
                       ("append_note", {"content": "한국어 메모"}),
                       ("write_note", {"content": "全部 😀", "overwrite": True})]:
        result = run_tool(notebook, tool, file_path="todo.txt", **args)
        assert result.startswith("Error:") and "GBK" in result and "nothing was changed" in result
        assert "U+1F600" in result or "U+D55C" in result
    assert path.read_bytes() == "待办：买菜\n".encode("gbk")
    assert versions.list_versions(kb, "todo.txt") == [] and notebook.undo()[0].startswith("Nothing to undo")


def test_a_gb18030_note_keeps_gb18030_and_takes_any_character(folder):
    kb, notebook = folder
    path = kb / "emoji.md"
    path.write_bytes("心情：😀\n".encode("gb18030"))  # four-byte sequences: not GBK
    assert "心情：😀" in run_tool(notebook, "read_note", file_path="emoji.md")
    run_tool(notebook, "append_note", file_path="emoji.md", content="明天：🌧")
    assert path.read_bytes() == "心情：😀\n明天：🌧\n".encode("gb18030")


def test_a_long_gbk_note_cut_inside_a_character_is_still_searched(folder):
    kb, notebook = folder
    head = "# 长笔记\n关键词：猕猴桃\n".encode("gbk")
    filler = b"filler line\n" * ((2_000_000 - len(head)) // 12)
    pad = b"x" * (2_000_000 - len(head) - len(filler) - 1)  # the index reads 2,000,000 bytes: cut inside 中
    (kb / "long.md").write_bytes(head + filler + pad + "中文结尾\n".encode("gbk"))
    assert "long.md" in run_tool(notebook, "search_notes", query="猕猴桃")


def test_latin1_and_cp1252_notes_are_read_as_before_and_never_rewritten(folder):
    kb, notebook = folder
    originals = {"müller.txt": "Herr Müller grüßt\n".encode("latin-1"),  # decodes as GBK, yet is no Chinese
                 "quote.md": "it’s “fine”\n".encode("cp1252")}
    for name, data in originals.items():
        (kb / name).write_bytes(data)
    read = run_tool(notebook, "read_note", file_path="müller.txt")
    assert "Herr M\ufffdller" in read and not any("\u4e00" <= ch <= "\u9fff" for ch in read)
    assert "quote.md" in run_tool(notebook, "search_notes", query="fine")
    for name in originals:
        result = run_tool(notebook, "append_note", file_path=name, content="more")
        assert result.startswith("Error:") and "not UTF-8" in result and "left alone" in result
        assert (kb / name).read_bytes() == originals[name]


def test_a_utf8_note_with_one_damaged_byte_is_not_read_as_gbk(folder):
    kb, notebook = folder
    (kb / "py.md").write_bytes("学习 Python 装饰器".encode() + b"\xab")  # would decode as GBK mojibake
    assert "学习 Python 装饰器\ufffd" in run_tool(notebook, "read_note", file_path="py.md")
    assert "py.md" in run_tool(notebook, "search_notes", query="装饰器")


@pytest.mark.parametrize("data", [
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0", "无BOM的UTF-16 IHDR".encode("utf-16-le"), "UTF-32 IHDR".encode("utf-32"),
    codecs.BOM_UTF16_LE + "IHDR\x01\x02\x03\x04\x05\x06".encode("utf-16-le") * 20,
], ids=["png", "utf-16 without a BOM", "utf-32", "control characters behind a UTF-16 BOM"])
def test_binary_looking_files_stay_hidden_and_untouched(folder, data):
    kb, notebook = folder
    (kb / "blob.md").write_bytes(data)
    assert "looks binary" in run_tool(notebook, "read_note", file_path="blob.md")
    assert "blob.md" not in run_tool(notebook, "search_notes", query="IHDR")
    result = run_tool(notebook, "append_note", file_path="blob.md", content="more")
    assert result.startswith("Error:") and "binary" in result
    assert (kb / "blob.md").read_bytes() == data

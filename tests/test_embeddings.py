"""Tests for search by meaning (embeddings.py and its part in search.py), through tools.execute_tool and
`python main.py --reindex` (main.main in this process), with the real openai SDK against tests/fake_embedder.py
on 127.0.0.1.

The fake's vectors are bags of concepts (shrink ~ resize, photo ~ image, 缩小 ~ resize): these tests check
the pipeline (chunks, vectors kept and resumed, fusion, failures), not the quality of a real model.
"""

import logging
import os
import sqlite3
import sys
from pathlib import Path

import pytest
import fake_server

sys.path.insert(0, str(Path(__file__).resolve().parent))
import embeddings  # noqa: E402
import db  # noqa: E402
import index  # noqa: E402
import tools  # noqa: E402
from conftest import hits, make_notebook, make_settings  # noqa: E402
from fake_embedder import FakeEmbedder  # noqa: E402


@pytest.fixture(autouse=True)
def cold(monkeypatch, notices):
    monkeypatch.setattr(embeddings, "EMBED_INDEX_RETRIES", 0)
    return notices


@pytest.fixture
def kb(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "images.md").write_text("# Resize an image\n\nUse convert to scale a picture down.\n\n"
                                    "## Details\n\n`convert in.png -resize 50% out.png`\n", encoding="utf-8")
    (root / "bread.md").write_text("# Sourdough\n\nFlour, water and a starter.\n", encoding="utf-8")
    (root / "tar.md").write_text("# tar\n\nArchive files into a tarball.\n", encoding="utf-8")
    return root


@pytest.fixture
def fake():
    with FakeEmbedder() as server:
        yield server


def notebook_for(kb, tmp_path, base_url, **more):
    return make_notebook(kb, **{"index_dir": tmp_path / "index", "embed_model": "fake-embed",
                                "embed_base_url": base_url} | more)


def search(notebook, query):
    result = tools.execute_tool("search_notes", {"query": query}, notebook)
    assert not result.error, result.text
    return result.text


def first_hit(text):
    return next(line.split(" — ")[0] for line in text.splitlines() if " — " in line)


def test_a_paraphrase_finds_the_note_keywords_cannot(kb, tmp_path, fake):
    assert "No notes match" in search(make_notebook(kb, index_dir=tmp_path / "index"), "shrink photo")
    assert fake.requests == []  # without EMBED_MODEL nothing is sent anywhere
    text = search(notebook_for(kb, tmp_path, fake.base_url), "shrink photo")
    assert text.startswith('No note has the words of "shrink photo"; notes close in meaning, best first:')
    assert first_hit(text) == "images.md"
    assert "3: Use convert to scale a picture down." in text  # the closest chunk's lines, as keyword hits show
    assert "bread.md" not in text  # nothing near in meaning: not padded with unrelated notes


def test_a_chinese_question_finds_an_english_note(kb, tmp_path, fake):
    assert first_hit(search(notebook_for(kb, tmp_path, fake.base_url), "如何缩小图片")) == "images.md"


def test_float_replies_work_as_base64_ones(kb, tmp_path):
    with FakeEmbedder(floats=True) as ollama_like:
        assert first_hit(search(notebook_for(kb, tmp_path, ollama_like.base_url), "shrink photo")) == "images.md"
    assert ollama_like.requests[0]["encoding_format"] == "base64"  # what the SDK asked for


def test_keyword_hits_keep_their_place_and_an_exact_title_stays_first(kb, tmp_path, fake):
    (kb / "notes-on-tar.md").write_text("# Archives\n\nI keep my tarball of photos here; tar tar tar.\n")
    text = search(notebook_for(kb, tmp_path, fake.base_url), "tar")
    assert first_hit(text) == "tar.md"
    assert text.startswith('2 notes match "tar"')


def test_embedder_down_answers_from_keywords_at_once_with_one_line(kb, tmp_path, cold):
    with FakeEmbedder(down=True) as down:
        notebook = notebook_for(kb, tmp_path, down.base_url)
        text = search(notebook, "sourdough")
        assert text.splitlines()[0].startswith("(Keyword results only: the embeddings endpoint")
        assert first_hit(text) == "bread.md"
        asked = len(down.requests)
        assert asked == 1  # a search never retries
        text = search(notebook, "sourdough")
        assert text.startswith("(Keyword results only: the embeddings endpoint") and first_hit(text) == "bread.md"
        assert len(down.requests) == asked  # later searches do not wait on it again for a while
    assert cold == []  # the result says it, and every interface shows a result's first line


def test_embedder_down_is_told_once_by_hand_and_in_the_chat(call_main, kb, tmp_path, fake_llm):
    with FakeEmbedder(down=True) as down:
        env = {"KA_INDEX_DIR": str(tmp_path / "index"), "EMBED_MODEL": "fake", "EMBED_BASE_URL": down.base_url}
        by_hand = call_main(kb=kb, base_url=fake_llm.base_url, stdin="/search sourdough\n", extra_env=env)
        fake_llm.replies = [{"tool_calls": [{"name": "search_notes", "arguments": '{"query": "sourdough"}'}]},
                            {"content": "Bake it."}]
        chat = call_main("how do I bake bread?", kb=kb, base_url=fake_llm.base_url, extra_env=env)
    assert by_hand.stdout.startswith("(Keyword results only: the embeddings endpoint"), by_hand.stderr
    assert "bread.md" in by_hand.stdout and "embeddings endpoint" not in by_hand.stderr
    assert chat.stdout == "Bake it.\n" and chat.stderr.count("embeddings endpoint") == 1, chat.stderr
    assert "← (Keyword results only: the embeddings endpoint" in chat.stderr  # the trace of the model's search
    told = [fake_server.unfenced(m["content"]) for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert told[0].startswith("(Keyword results only: the embeddings endpoint")


def test_first_search_by_meaning_waits_for_another_process_writing_the_index(kb, tmp_path, fake, monkeypatch,
                                                                             cold):
    monkeypatch.setattr(db, "BUSY_TIMEOUT_S", 0.01)
    notebook = notebook_for(kb, tmp_path, fake.base_url)
    search(make_notebook(kb, index_dir=tmp_path / "index"), "sourdough")  # keywords only: the index is built
    other = sqlite3.connect(index.index_path(kb, tmp_path / "index"), isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long build

    handler = logging.getLogger("knowledge-agent").handlers[0]
    collect = handler.emit

    def told(record):  # the other process finishes once this one says that it waits
        collect(record)
        if other.in_transaction:
            other.execute("ROLLBACK")
    monkeypatch.setattr(handler, "emit", told)
    assert first_hit(search(notebook, "shrink photo")) == "images.md"
    other.close()
    assert len(cold) == 1 and "waiting for it" in cold[0]


def test_slow_embedder_is_cut_short(kb, tmp_path, monkeypatch):
    monkeypatch.setattr(embeddings, "EMBED_QUERY_TIMEOUT_S", 0.2)
    with FakeEmbedder(delay=5) as slow:
        text = search(notebook_for(kb, tmp_path, slow.base_url), "sourdough")
    assert "Keyword results only" in text.splitlines()[0] and first_hit(text) == "bread.md"


def test_refusing_endpoint_and_deepseek_without_embeddings_say_so(kb, tmp_path, fake):
    with FakeEmbedder(refuse=True) as refusing:
        assert "Not Found" in search(notebook_for(kb, tmp_path, refusing.base_url), "sourdough").splitlines()[0]
    deepseek = make_notebook(kb, index_dir=tmp_path / "index", base_url="https://api.deepseek.com",
                             embed_model="bge-m3")
    text = search(deepseek, "sourdough")
    assert "DeepSeek serves no embeddings: set EMBED_BASE_URL" in text.splitlines()[0]
    assert first_hit(text) == "bread.md"


def test_chat_providers_url_and_key_are_used_unless_embeddings_have_their_own(kb):
    chat = make_settings(kb, base_url="http://127.0.0.1:1/v1", api_key="chat-key", embed_model="m")
    assert embeddings.embedder_of(chat) == embeddings.Embedder("m", "http://127.0.0.1:1/v1", "chat-key")
    own = make_settings(kb, api_key="chat-key", embed_model="m", embed_base_url="http://127.0.0.1:2/v1")
    assert embeddings.embedder_of(own).api_key != "chat-key"  # the chat key is not sent to another server


def test_an_outside_edit_sends_only_the_changed_chunk(kb, tmp_path, fake):
    notebook = notebook_for(kb, tmp_path, fake.base_url)
    search(notebook, "picture")
    before = len(fake.inputs())
    note = kb / "images.md"
    note.write_text(note.read_text().replace("50% out.png", "25% small.png"))
    search(notebook, "picture")
    sent = fake.inputs()[before:]
    assert sent[0] == "picture" and len(sent) == 2  # the query, then the one changed chunk
    assert "25% small.png" in sent[1] and "scale a picture" not in sent[1]


def test_interrupted_indexing_keeps_what_it_embedded_and_resumes(kb, tmp_path, monkeypatch, cold):
    monkeypatch.setattr(embeddings, "EMBED_BATCH", 1)
    with FakeEmbedder(fail_after=2) as stops:
        assert embeddings.reindex(notebook_for(kb, tmp_path, stops.base_url)) == 1
    assert any("2 of 4 chunks are embedded and kept" in n for n in cold)
    with FakeEmbedder() as again:
        assert embeddings.reindex(notebook_for(kb, tmp_path, again.base_url)) == 0
        assert len(again.inputs()) == 2  # only the two it had not embedded
        assert first_hit(search(notebook_for(kb, tmp_path, again.base_url), "shrink photo")) == "images.md"


def test_another_model_rebuilds_the_vectors_only(kb, tmp_path, fake):
    first, other = notebook_for(kb, tmp_path, fake.base_url), notebook_for(kb, tmp_path, fake.base_url,
                                                                             embed_model="another")
    search(first, "picture")
    notes = lambda idx: idx.conn.execute("SELECT id, path FROM notes ORDER BY id").fetchall()  # noqa: E731
    ids, before = first.with_index(notes), len(fake.inputs())
    search(other, "picture")
    assert len(fake.inputs()) - before == 1 + 4  # the query and every chunk again
    assert other.with_index(notes) == ids


def test_vectors_are_compact_int8(kb, tmp_path, fake):
    notebook = notebook_for(kb, tmp_path, fake.base_url)
    search(notebook, "picture")
    sizes = notebook.with_index(lambda idx: idx.conn.execute("SELECT length(signs) + length(vec) FROM vectors")
                                .fetchall())
    assert sizes and all(size == 128 + 4 + 1024 for (size,) in sizes)  # 1,024 dimensions: under 1.2 KB


def test_chunks_start_at_headings_and_stay_near_the_size():
    text = "# Title\n\nintro\n\n## One\n\n" + "\n\n".join(["word " * 60] * 10) + "\n\n## Two\n\nend\n"
    chunks = embeddings.chunks_of("Title", text)
    assert chunks[0] == (1, "# Title\n\nintro")
    assert chunks[1][1].startswith("Title\n\n## One")  # the note's title gives a later chunk its context
    assert chunks[-1] == (text.splitlines().index("## Two") + 1, "Title\n\n## Two\n\nend")
    assert all(len(body) <= embeddings.EMBED_CHUNK_CHARS + 100 for _, body in chunks)


def test_main_reindex_builds_everything_with_progress_and_exits_0(call_main, kb, tmp_path, fake):
    env = {"KA_INDEX_DIR": str(tmp_path / "index"), "EMBED_MODEL": "fake", "EMBED_BASE_URL": fake.base_url}
    done = call_main("--reindex", kb=kb, base_url=None, key=None, extra_env=env)
    assert done.returncode == 0, done.stderr
    assert "keyword index: 3 notes up to date" in done.stderr and "all 4 chunks embedded" in done.stderr
    assert done.stdout == ""
    with FakeEmbedder(refuse=True) as refusing:  # answered at once: the SDK does not retry a 404
        env["EMBED_BASE_URL"] = refusing.base_url
        (kb / "new.md").write_text("# New\n\nfresh words\n")
        failed = call_main("--reindex", kb=kb, base_url=None, key=None, extra_env=env)
    assert failed.returncode == 1 and "run `python main.py --reindex` again" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_model_that_finds_everything_alike_brings_only_what_stands_out(kb, tmp_path):
    """With e5-small every note shared a cosine near 0.8 with a paraphrase: as a share of the best one, every
    note counted as close in meaning and was listed, above the right one's neighbours by keywords."""
    for n in range(12):
        (kb / f"other{n}.md").write_text(f"# Note {n}\n\nAbout gardening, cooking and travel number {n}.\n",
                                         encoding="utf-8")
    with FakeEmbedder(common=2.5) as alike:
        text = search(notebook_for(kb, tmp_path, alike.base_url), "shrink photo")
    assert first_hit(text) == "images.md"
    assert "(1 shown for their meaning only)" in text or text.count(" — ") == 1, text
    assert "other" not in text and "bread.md" not in text


def test_models_get_the_query_and_passage_prefixes_their_family_expects(kb, tmp_path, fake):
    search(notebook_for(kb, tmp_path, fake.base_url, embed_model="multilingual-e5-small"), "shrink photo")
    sent = fake.inputs()
    assert sent[0] == "query: shrink photo" and len(sent) > 1 and all(t.startswith("passage: ") for t in sent[1:])
    assert embeddings.prefixes("bge-m3") == ("", "") and embeddings.prefixes("nomic-embed-text")[0]
    assert embeddings.prefixes("bge-small-en-v1.5")[0].startswith("Represent this sentence")
    fake.requests.clear()
    search(notebook_for(kb, tmp_path, fake.base_url, embed_model="multilingual-e5-small", embed_query_prefix="",
                        embed_doc_prefix="doc: "), "shrink photo")  # set by hand: all chunks embedded again
    sent = fake.inputs()
    assert sent[0] == "shrink photo" and len(sent) > 1 and all(t.startswith("doc: ") for t in sent[1:])


def test_meaning_never_ranks_the_keyword_best_lower(tmp_path, fake):
    """Fused by reciprocal rank alone, a note close in meaning that holds one word (a web gallery of resized
    pictures) passed the note keywords rank first (shrink + photo): meaning reorders only below it."""
    kb = tmp_path / "notes"
    for name, text in {"shrink.md": "# Shrink\n\nShrink a photo with care.\n",
                       "gallery.md": "# Web gallery\n\nResize pictures, scale images, downsize pictures for the web.\n",
                       "thumbs.md": "# Thumbnails\n\nScale down images and pictures to resize them.\n",
                       "resize.md": "# Resizing\n\nResize and scale a picture, downsize an image.\n",
                       "web.md": "# Web pages\n\nA website on the web.\n",
                       "bread.md": "# Sourdough\n\nFlour, water and a starter.\n"}.items():
        kb.mkdir(exist_ok=True)
        (kb / name).write_text(text, encoding="utf-8")
    by_words = hits(search(make_notebook(kb, index_dir=tmp_path / "index"), "shrink photo web"))
    both = hits(search(notebook_for(kb, tmp_path, fake.base_url), "shrink photo web"))
    assert by_words[:2] == ["shrink.md", "web.md"] and both[:2] == ["shrink.md", "gallery.md"], both


def test_a_search_in_days_that_also_shows_the_other_notes_embeds_the_question_once(kb, tmp_path, fake):
    notebook = notebook_for(kb, tmp_path, fake.base_url)
    search(notebook, "picture")  # the notes embedded
    before = len(fake.inputs())
    os.utime(kb / "images.md", (0, 86400 * 365 * 30))  # dated 1999
    (kb / "later.md").write_text("A picture, no words of the rest.\n", encoding="utf-8")
    days = {"after": "2020-01-01"}
    text = tools.execute_tool("search_notes", {"query": "scale picture", **days}, notebook).text
    assert text.startswith("Beyond the notes dated")  # today's notes have only "picture": images.md comes first
    assert fake.inputs()[before:].count("scale picture") == 1

#!/usr/bin/env python3
"""Benchmark the GRAPH and TEMPORAL components (issue 12): extractor, entity graph, period extraction.

Corpus: ``n`` one-sentence documents (default 100k) written from templates with people, places and
organisations drawn from a Zipf distribution (fixed seed), so a few names are hubs and most are rare.
The graph is built from what the default extractor *finds* in the text, not from the names used to
write it (the extractor's precision and recall against those names are reported too).

Measured:
- ingest overhead: engine ingest (hash embedder, memory store) of the corpus, then the default
  extractor on every sentence and the graph update, timed separately (the engine does not call them
  yet) and reported as the ratio (engine + extraction + graph) / engine; also on the demo corpus;
- graph: build, compile (first query after writes), size, persistence rows out and back;
- GRAPH activation for questions naming a hub, a median and a rare entity and two entities, hops 1-2,
  plus the top-100 window an RRF arm takes; the median over ``--repeat`` runs;
- TEMPORAL: ``extract_period`` on questions in six languages, and dateparser's cold start;
- the wired engine (memory store, hash embedder): ingest with and without the default extractor (plus the
  first GRAPH query, which builds the graph), then ``GRAPH`` and the four-arm RRF query via ``search``;
- with ``--postgres``: the same graph in PostgreSQL tables (pgserver) and the one-statement activation.

    python bench/graph.py [--n 100000] [--repeat 30] [--postgres] [--out bench/results/graph.json]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, log, machine_info, stamp_end, timed_runs, write_json  # noqa: E402
from nlql import Engine  # noqa: E402
from nlql.embedders import HashEmbedder  # noqa: E402
from nlql.text.entities import RuleEntityExtractor, entity_key  # noqa: E402
from nlql.text.graph import EntityGraph  # noqa: E402
from nlql.text.split import split_sentences  # noqa: E402
from nlql.text.temporal import extract_period, warm_up_extract  # noqa: E402

FIRST = ("Alice Bruno Carla Dmitri Elena Farid Greta Hugo Ines Jonas Keiko Lars Mira Nadia Omar Paula Quentin "
         "Rosa Stefan Tariq Uma Viktor Wanda Xavier Yara Zoltan Anders Beatriz Chen Dara Emil Fatima Goran "
         "Hana Ivan Julia Kofi Lena Marco Nora").split()
LAST = ("Moreau Stein Rossi Novak Garcia Haddad Lindqvist Okafor Tanaka Kowalski Dubois Fischer Silva "
        "Petrov Murphy Costa Jensen Nakamura Weber Romano Hansen Yilmaz Schmidt Ferreira Andersson Kaur "
        "Horvat Bauer Laurent Moretti").split()
PLACES = ("Lisbon Oslo Nairobi Kyoto Quito Tallinn Dakar Hanoi Lima Tbilisi Porto Zagreb Accra Busan Cusco "
          "Bergen Malmo Turin Leeds Ghent").split()
ORGS = ["NASA", "CERN", "UNICEF", "WHO", "IMF", "OECD", "ESA", "MIT", "NOAA", "IAEA",
        "Red Cross", "World Bank", "Bank of England", "Acme Corporation", "Globex", "Initech", "Umbrella Labs",
        "Stark Industries", "Wayne Enterprises", "Tyrell Systems"]
VERBS = ["met", "called", "wrote to", "argued with", "visited", "thanked", "interviewed", "advised", "joined",
         "criticised"]
FILLER = ["about", "the", "new", "budget", "plan", "report", "after", "a", "long", "meeting", "on", "energy",
          "policy", "and", "the", "results", "of", "last", "study", "in", "detail", "with", "several", "notes"]
OPENERS = ["Yesterday", "Then", "Later", "In the morning", "According to the notes", "Last spring", ""]


def corpus(n: int, seed: int = 7) -> tuple[list[str], list[list[str]]]:
    """``n`` sentences and the names used to write each one."""
    rng = random.Random(seed)
    people = [f"{f} {la}" for f in FIRST for la in LAST]  # 1,200 people
    rng.shuffle(people)
    pool = people + PLACES + ORGS
    weights = [1.0 / (i + 1) ** 1.05 for i in range(len(pool))]  # Zipf: a few hubs, a long tail
    texts, truth = [], []
    for _ in range(n):
        k = rng.choices([0, 1, 2, 3], weights=[15, 40, 30, 15])[0]
        names = list(dict.fromkeys(rng.choices(pool, weights=weights, k=k)))
        filler = " ".join(rng.sample(FILLER, 6))
        opener = rng.choice(OPENERS)
        if not names:
            text = f"{(opener + ' the') if opener else 'The'} team discussed {filler}."
        elif len(names) == 1:
            text = f"{opener + ' ' if opener else ''}{names[0]} {rng.choice(VERBS)} us {filler}."
        else:
            rest = " and ".join(names[1:])
            text = f"{opener + ' ' if opener else ''}{names[0]} {rng.choice(VERBS)} {rest} {filler}."
        texts.append(text[0].upper() + text[1:])
        truth.append(names)
    return texts, truth


def extraction_quality(found: list[list[str]], truth: list[list[str]]) -> dict[str, float]:
    tp = fp = fn = 0
    for f, t in zip(found, truth):
        fk, tk = {entity_key(x) for x in f}, {entity_key(x) for x in t}
        tp += len(fk & tk)
        fp += len(fk - tk)
        fn += len(tk - fk)
    return {"precision": round(tp / max(1, tp + fp), 4), "recall": round(tp / max(1, tp + fn), 4)}


def ingest_overhead(texts: list[str], metas: list[dict[str, Any]] | None, ids: list[str] | None,
                    repeat: int) -> dict[str, Any]:
    """Engine ingest vs. the extractor + graph work the same ingest adds (CPU and wall, best of runs)."""
    extractor = RuleEntityExtractor()
    extractor("Warm Up")
    base_wall, base_cpu, extra_wall, extra_cpu, ext_cpu, graph_cpu = [], [], [], [], [], []
    for _ in range(repeat):
        engine = Engine(embedder=HashEmbedder(dim=384), warm_up=False)
        w, c = time.perf_counter(), time.process_time()
        engine.add_texts(texts, ids=ids, metadatas=metas)
        base_wall.append(time.perf_counter() - w)
        base_cpu.append(time.process_time() - c)
        engine.close()
        graph = EntityGraph()
        # the engine has split the documents already; the extractor runs on each sentence
        split = [[text[s:e] for s, e in split_sentences(text)] for text in texts]
        w, c = time.perf_counter(), time.process_time()
        docs = [[(p, extractor(sentence)) for p, sentence in enumerate(sentences)] for sentences in split]
        c_ext = time.process_time()
        for lo in range(0, len(docs), 256):  # the engine writes in batches of 256 documents
            graph.add_many([(ids[i] if ids else str(i), docs[i], None) for i in range(lo, min(len(docs), lo + 256))])
        graph.activate("x", hops=1)  # the compile the first query pays
        extra_wall.append(time.perf_counter() - w)
        extra_cpu.append(time.process_time() - c)
        ext_cpu.append(c_ext - c)
        graph_cpu.append(time.process_time() - c_ext)
    b, x = min(base_cpu), min(extra_cpu)
    return {
        "sentences": sum(len(split_sentences(t)) for t in texts),
        "engine_ingest_cpu_s": round(b, 3), "engine_ingest_wall_s": round(min(base_wall), 3),
        "extract_cpu_s": round(min(ext_cpu), 3), "graph_add_compile_cpu_s": round(min(graph_cpu), 3),
        "extra_cpu_s": round(x, 3), "extra_wall_s": round(min(extra_wall), 3),
        "ratio_cpu": round((b + x) / b, 3), "ratio_wall": round((min(base_wall) + min(extra_wall)) / min(base_wall), 3),
        "note": "engine.add_texts (hash embedder, memory store) vs. the default extractor on every sentence + "
                "EntityGraph.add_many in batches of 256 + the first compile, timed one after the other; best of the runs",
    }


def graph_queries(graph: EntityGraph, questions: dict[str, str], repeat: int) -> dict[str, Any]:
    out = {}
    for label, q in questions.items():
        for hops in (1, 2):
            act = graph.activate(q, hops=hops, decay=0.5)
            med, runs = timed_runs(lambda q=q, hops=hops: graph.activate(q, hops=hops, decay=0.5), repeat)
            cpu = []
            for _ in range(repeat):
                c = time.process_time()
                graph.activate(q, hops=hops, decay=0.5)
                cpu.append((time.process_time() - c) * 1000)
            top_med, _ = timed_runs(lambda q=q, hops=hops: graph.activate(q, hops=hops, decay=0.5).top(100), repeat)
            out[f"{label}/hops={hops}"] = {
                "question": q, "found": [e.name for e in act.found], "entities": act.entity_count,
                "rows": len(act), "median_ms": round(med, 3), "p90_ms": round(sorted(runs)[int(0.9 * len(runs))], 3),
                "cpu_median_ms": round(sorted(cpu)[len(cpu) // 2], 3),
                "with_top100_median_ms": round(top_med, 3),
            }
            log(f"  GRAPH {label} hops={hops}: {act.entity_count} entities, {len(act)} rows, {med:.2f} ms")
    return out


def temporal_queries(repeat: int) -> dict[str, Any]:
    now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
    t = time.perf_counter()
    cold = warm_up_extract()
    cold_s = time.perf_counter() - t
    questions = {
        "en": "what did we decide last week?", "es": "¿qué decidimos la semana pasada?",
        "fr": "qu'avons-nous décidé la semaine dernière ?", "de": "Was haben wir letzte Woche beschlossen?",
        "it": "cosa abbiamo deciso la settimana scorsa?", "zh": "我们上周决定了什么？",
        "none": "who mentioned Russell in the notes?", "dateparser": "what did we decide on 12/25/2024?",
    }
    out: dict[str, Any] = {"dateparser_search_cold_start_s": round(max(cold, cold_s), 3)}
    for label, q in questions.items():
        p = extract_period(q, now)
        med, _ = timed_runs(lambda q=q: extract_period(q, now), repeat)
        out[label] = {"question": q, "found": None if p is None else [p.text, p.description, p.method],
                      "median_ms": round(med, 3)}
        log(f"  TEMPORAL {label}: {out[label]['found']} {med:.2f} ms")
    return out


def postgres_part(graph: EntityGraph, questions: dict[str, str], repeat: int) -> dict[str, Any]:
    import psycopg

    from bench.stores import Postgres
    from nlql.sql.binder import Binder
    from nlql.sql.postgres import PostgresDialect

    dialect = PostgresDialect("b")

    def pyformat(fragment: Any) -> tuple[str, list[Any]]:
        b = Binder(dialect, style="pyformat")
        return b.render(fragment), b.values

    pg = Postgres()
    try:
        with psycopg.connect(pg.uri, autocommit=True) as conn:
            for ddl in dialect.graph_schema():
                conn.execute(ddl)
            rows = graph.to_rows()
            by_doc: dict[str, dict[int, list[str]]] = {}
            for doc, _, pos, name in rows:
                by_doc.setdefault(doc, {}).setdefault(pos, []).append(name)
            docs = [(d, sorted(s.items())) for d, s in by_doc.items()]
            t = time.perf_counter()
            for lo in range(0, len(docs), 5000):
                with conn.transaction():
                    for stmt in dialect.graph_add(docs[lo:lo + 5000]):
                        text, values = pyformat(stmt)
                        conn.execute(text, values)
            load_s = time.perf_counter() - t
            conn.execute("ANALYZE")
            out: dict[str, Any] = {"load_s": round(load_s, 2), "versions": pg.versions}
            for label, q in questions.items():
                for hops in (1, 2):
                    text, values = pyformat(dialect.graph_activation(q, hops, 0.5))
                    got = conn.execute(text, values).fetchall()
                    expected = graph.activate(q, hops=hops, decay=0.5).as_dict()
                    same = {(d, p): v for d, p, v in got} == expected
                    med, _ = timed_runs(lambda text=text, values=values: conn.execute(text, values).fetchall(),
                                        max(3, repeat // 3))
                    out[f"{label}/hops={hops}"] = {"rows": len(got), "median_ms": round(med, 2),
                                                   "same_as_python": same}
                    log(f"  postgres GRAPH {label} hops={hops}: {len(got)} rows, {med:.1f} ms, same={same}")
            return out
    finally:
        pg.stop()


ENGINE_QUERIES = {
    "graph": "SELECT SENTENCE LET g = GRAPH($q) WHERE g IS NOT NULL ORDER BY g DESC LIMIT 10",
    "four_arms": "SELECT SENTENCE LET s = SIMILARITY(content, $q), k = BM25(content, $q), g = GRAPH($q), "
                 "t = TEMPORAL(meta.date, $q), f = RRF(s, k, g, t) ORDER BY f DESC LIMIT 10",
}


def engine_part(texts: list[str], question: str, repeat: int) -> dict[str, Any]:
    """The wired engine at full size: ingest without and with the default extractor (the graph is built by
    the first GRAPH query, so that query's time is part of the ingest cost), then GRAPH and the four-arm
    query through ``engine.search`` (the hash embedder: embedding is a few microseconds)."""
    now = datetime(2026, 11, 30, 15, 0, tzinfo=timezone.utc)
    rng = random.Random(3)
    metas = [{"date": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}"} for _ in texts]
    ids = [f"d{i}" for i in range(len(texts))]
    q = f"{question} last week"
    out: dict[str, Any] = {"question": q, "queries": ENGINE_QUERIES}
    plain = Engine(embedder=HashEmbedder(dim=384), entity_extractor=None, warm_up=False, clock=lambda: now)
    t, c = time.perf_counter(), time.process_time()
    plain.add_texts(texts, ids=ids, metadatas=metas)
    plain_s, plain_cpu = time.perf_counter() - t, time.process_time() - c
    plain.close()
    engine = Engine(embedder=HashEmbedder(dim=384), warm_up=False, clock=lambda: now)
    t, c = time.perf_counter(), time.process_time()
    engine.add_texts(texts, ids=ids, metadatas=metas)
    ingest_s, ingest_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    engine.search(ENGINE_QUERIES["graph"], params={"q": q})
    build_s, build_cpu = time.perf_counter() - t, time.process_time() - c
    # CPU time too: on a shared machine the wall clock of one ingest swings with the other jobs
    out["ingest"] = {"without_extractor_s": round(plain_s, 2), "with_extractor_s": round(ingest_s, 2),
                     "first_graph_query_s": round(build_s, 2),
                     "ratio": round((ingest_s + build_s) / plain_s, 3),
                     "cpu_without_extractor_s": round(plain_cpu, 2), "cpu_with_extractor_s": round(ingest_cpu, 2),
                     "cpu_first_graph_query_s": round(build_cpu, 2),
                     "ratio_cpu": round((ingest_cpu + build_cpu) / plain_cpu, 3)}
    log(f"  engine ingest: {out['ingest']}")
    engine.search(ENGINE_QUERIES["four_arms"], params={"q": q})  # the BM25 index is built here
    for label, text in ENGINE_QUERIES.items():
        hits = engine.search(text, params={"q": q})
        med, runs = timed_runs(lambda text=text: engine.search(text, params={"q": q}), repeat)
        cpu = []
        for _ in range(repeat):
            c = time.process_time()
            engine.search(text, params={"q": q})
            cpu.append((time.process_time() - c) * 1000)
        out[label] = {"median_ms": round(med, 3), "p90_ms": round(sorted(runs)[int(0.9 * len(runs))], 3),
                      "cpu_median_ms": round(sorted(cpu)[len(cpu) // 2], 3),
                      "rows": len(hits), "target_ms": 10 if label == "graph" else 30,
                      "fast_path": hits.stats.get("fast_path"), "store": hits.stats.get("store")}
        log(f"  engine {label}: {med:.2f} ms median, {len(hits)} rows")
    engine.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--ingest-repeat", type=int, default=2)
    ap.add_argument("--postgres", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "graph.json")
    args = ap.parse_args()
    started = time.perf_counter()
    results: dict[str, Any] = {"machine": machine_info(), "n": args.n}

    log("demo corpus: ingest overhead")
    demo = [json.loads(line) for line in (ROOT / "nlql" / "data" / "demo.jsonl").read_text("utf-8").splitlines()]
    results["ingest_demo"] = ingest_overhead([d["text"] for d in demo], [d["metadata"] for d in demo],
                                             [d["id"] for d in demo], repeat=5)
    log(f"  {results['ingest_demo']}")

    log(f"synthetic corpus: {args.n} sentences")
    texts, truth = corpus(args.n)
    extractor = RuleEntityExtractor()
    found = [extractor(t) for t in texts]
    results["extraction"] = extraction_quality(found, truth)
    results["extraction"]["entities_per_sentence"] = round(sum(map(len, found)) / len(found), 3)
    log(f"  extraction vs the names used: {results['extraction']}")
    results["ingest_synthetic"] = ingest_overhead(texts, None, [f"d{i}" for i in range(len(texts))],
                                                  repeat=args.ingest_repeat)
    log(f"  {results['ingest_synthetic']}")

    graph = EntityGraph()
    t = time.perf_counter()
    for lo in range(0, len(found), 256):
        graph.add_many([(f"d{i}", [(0, found[i])], None) for i in range(lo, min(len(found), lo + 256))])
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    graph.activate("x")
    compile_s = time.perf_counter() - t
    edges = graph.edges()
    counts = Counter(k for names in found for k in {entity_key(n) for n in names})
    ranked = [k for k, _ in counts.most_common()]
    hub, median, rare = ranked[0], ranked[len(ranked) // 2], ranked[-1]
    results["graph"] = {
        "entities": len(graph), "edges": len(edges), "max_weight": max(edges.values()),
        "add_s": round(add_s, 3), "compile_s": round(compile_s, 3),
        "hub": [graph.display_name(hub), counts[hub]], "median": [graph.display_name(median), counts[median]],
        "rare": [graph.display_name(rare), counts[rare]],
    }
    rows = graph.to_rows()
    t = time.perf_counter()
    rows = graph.to_rows()
    results["graph"]["to_rows_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    back = EntityGraph.from_rows(rows)
    back.activate("x")
    results["graph"]["from_rows_and_compile_s"] = round(time.perf_counter() - t, 3)
    results["graph"]["rows"] = len(rows)
    log(f"  graph: {results['graph']}")
    questions = {
        "hub": f"who mentioned {graph.display_name(hub)}?",
        "median": f"what did {graph.display_name(median)} say?",
        "rare": f"notes about {graph.display_name(rare)}",
        "two": f"when did {graph.display_name(median)} meet {graph.display_name(ranked[len(ranked) // 3])}?",
        "none": "what did we decide about the budget?",
    }
    results["graph_queries"] = graph_queries(graph, questions, args.repeat)
    results["target_ms"] = 10
    results["worst_median_ms"] = max(v["median_ms"] for v in results["graph_queries"].values())
    results["temporal"] = temporal_queries(args.repeat)
    log("the wired engine (memory store)")
    results["engine"] = engine_part(texts, questions["median"], args.repeat)
    if args.postgres:
        log("postgres")
        results["postgres"] = postgres_part(graph, questions, args.repeat)
    stamp_end(results, started)
    write_json(args.out, results)
    log(f"wrote {args.out}")
    print(json.dumps({k: results[k] for k in ("ingest_demo", "ingest_synthetic", "graph", "worst_median_ms", "engine")},
                     indent=1))


if __name__ == "__main__":
    main()

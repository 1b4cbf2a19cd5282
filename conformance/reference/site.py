"""What the reference shows, gathered from the spec folder and the engines' results: `Site`.

`collect` reads the cases, the sources and claims, the features, the case language, the message
inventory, the comparison tables and the topic groups, checks what the pages rely on, and hands
the generator (`conformance.reference.generate`) one `Site`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from conformance.casefile.case import Case
from conformance.casefile.comparisons import Comparison, read_comparisons
from conformance.casefile.loader import DEFAULT_SPEC_DIR, SpecResources, load
from conformance.casefile.messages import read_inventory
from conformance.casefile.sources import SourceDocument, load_sources
from conformance.reference import rst
from conformance.reference.messages import MessageIndex, build_index
from conformance.reference.results import EngineResults
from conformance.reference.session import TORCH_VERSION
from conformance.traceability import Claim, Trace, trace

ORACLE = f"PyTorch {TORCH_VERSION} (CPU)"
SHORT_ORACLE = "PyTorch " + ".".join(TORCH_VERSION.split(".")[:2])
GUIDE = Path("docs") / "adapters.md"
# Page names that are not topics; a topic with one of these names would overwrite the page.
RESERVED = {"index", "errata", "features", "fuzzing", "adapters", "case-language", "sources",
            "engines", "search", "genindex", "messages", "comparisons"}
SHOWN_VERDICTS = ("passed", "failed", "error", "unsupported", "xfail", "stale")
CLAIM_ID = re.compile(r"^[A-Za-z0-9_.-]+$")
EXAMPLE_CASE = "retain_grad.nonleaf-keeps-grad"
"""The case the home page uses to show how a rule reads, when the spec has it."""
LACKS = "engine lacks feature "
"""How the executor words an `unsupported` verdict for a missing feature."""


class GenerateError(ValueError):
    """The spec data cannot make a site; the message says which file and what to do."""


@dataclass
class Site:
    spec_dir: Path
    cases: list[Case]
    topics: dict[str, list[Case]]
    intros: dict[str, list[tuple[str, str]]]
    sources: dict[str, SourceDocument]
    trace: Trace
    features: dict[str, str]
    features_intro: list[tuple[str, str]]
    results: list[EngineResults]
    interpreting: str
    guide: str | None
    open_findings: list[Case] | None = None
    open_findings_dir: str | None = None
    claims_by_id: dict[str, Claim] = field(default_factory=dict)
    messages: MessageIndex | None = None
    comparisons: list[Comparison] = field(default_factory=list)
    groups: list[tuple[str, str, list[str]]] = field(default_factory=list)
    """The home page's groups of topics: (title, the question it answers, topics)."""
    referenced_by: dict[str, list[str]] = field(default_factory=dict)
    """Case id -> the cases whose `see_also` or `fix` name it (the other end of each link)."""
    titles: dict[str, str] = field(default_factory=dict)
    """Topic -> the title its page and the sidebar show (`titles` of `topics.yaml`)."""
    subjects: dict[str, str] = field(default_factory=dict)
    """Case id -> the topic whose subject it is, for the cases filed by origin (`subjects` of
    `topics.yaml`): their subject's page lists them too."""

    def title(self, topic: str) -> str:
        return self.titles.get(topic) or plain_title(topic)

    def placed_under(self, topic: str) -> list[Case]:
        """The cases filed by origin whose subject is `topic`, in their pages' order."""
        return [case for cases in self.topics.values() for case in cases
                if self.subjects.get(case.id) == topic]

    @property
    def case_by_id(self) -> dict[str, Case]:
        return {case.id: case for case in self.cases}


def load_cases(spec_dir: Path) -> list[Case]:
    result = load([spec_dir / "cases"], SpecResources.load(spec_dir))
    if result.problems:
        listed = "\n".join(str(p) for p in result.problems[:20])
        raise GenerateError(f"{len(result.problems)} problem(s) in the spec "
                            f"(`python -m conformance lint` lists them all):\n{listed}")
    return result.cases


def load_open_findings(folder: Path, spec_dir: Path) -> list[Case]:
    """The finding cases the fuzzer wrote (`fuzz_<hash>.yaml`) that are kept open in `folder`."""
    files = sorted(folder.glob("*.yaml"))
    if not files:
        return []
    result = load(files, SpecResources.load(spec_dir))
    if result.problems:
        listed = "\n".join(str(p) for p in result.problems[:20])
        raise GenerateError(f"open findings in {folder} do not load:\n{listed}")
    return result.cases


def collect(spec_dir: Path = DEFAULT_SPEC_DIR, *, results: Sequence[EngineResults],
            cases: Sequence[Case] | None = None,
            open_findings_dir: Path | None = None) -> Site:
    """Everything the pages show, read from `spec_dir` (and `open_findings_dir`)."""
    spec_dir = Path(spec_dir)
    cases = list(cases) if cases is not None else load_cases(spec_dir)
    topics: dict[str, list[Case]] = {}
    for case in sorted(cases, key=lambda c: (c.topic, c.file or "", c.line or 0)):
        topics.setdefault(case.topic, []).append(case)
    clash = sorted(set(topics) & RESERVED)
    if clash:
        raise GenerateError(f"topic name(s) {', '.join(clash)} would replace a page of the "
                            f"reference; rename the case file(s) in {spec_dir / 'cases'}")
    intros = {topic: _leading_comment(spec_dir / "cases" / f"{topic}.yaml") for topic in topics}
    sources, problems = load_sources(spec_dir / "sources.yaml")
    if problems:
        raise GenerateError(f"{spec_dir / 'sources.yaml'}:{problems[0][0]}: {problems[0][1]}")
    traced = trace(spec_dir)
    claims_by_id = {claim.id: claim for doc in traced.documents for claim in doc.claims}
    bad = sorted(claim_id for claim_id in claims_by_id if not CLAIM_ID.match(claim_id))
    if bad:
        raise GenerateError(f"{spec_dir / 'claims.yaml'}: claim ids must be letters, digits, "
                            f"'_', '.' and '-': {', '.join(bad)}")
    features_path = spec_dir / "features.yaml"
    features_data = yaml.safe_load(features_path.read_text(encoding="utf-8")) or {}
    guide_path = spec_dir.parent / GUIDE
    open_findings = None
    if open_findings_dir is not None:
        open_findings = load_open_findings(Path(open_findings_dir), spec_dir)
    inventory, problems = read_inventory(spec_dir)
    tables, table_problems = read_comparisons(spec_dir, [case.id for case in cases])
    problems += table_problems
    if problems:
        listed = "\n".join(str(p) for p in problems[:20])
        raise GenerateError(f"{len(problems)} problem(s) in the message inventory or the "
                            f"comparison tables (`python -m conformance lint` lists them "
                            f"all):\n{listed}")
    return Site(
        spec_dir=spec_dir, cases=list(cases), topics=topics, intros=intros, sources=sources,
        trace=traced, features={str(k): str(v) for k, v in features_data.items()},
        features_intro=_leading_comment(features_path), results=list(results),
        interpreting=(spec_dir / "INTERPRETING.md").read_text(encoding="utf-8"),
        guide=guide_path.read_text(encoding="utf-8") if guide_path.is_file() else None,
        open_findings=open_findings,
        open_findings_dir=str(open_findings_dir) if open_findings_dir is not None else None,
        claims_by_id=claims_by_id,
        messages=build_index(cases, inventory),
        groups=topic_groups(spec_dir / TOPIC_GROUPS, list(topics)),
        # A spec folder with fewer case files (a subset) shows only the tables it can link.
        comparisons=[t for t in tables if set(t.cases) <= {case.id for case in cases}],
        referenced_by=_referenced_by(cases),
        titles=topic_titles(spec_dir / TOPIC_GROUPS, list(topics)),
        subjects=case_subjects(spec_dir / TOPIC_GROUPS, cases,
                               {p.stem for p in (spec_dir / "cases").glob("*.yaml")}),
    )


TOPIC_GROUPS = "topics.yaml"


def topic_groups(path: Path, topics: list[str]) -> list[tuple[str, str, list[str]]]:
    """The groups of `topics.yaml`, checked: no topic in two groups. A spec without the file
    gets one group of every topic; a topic the file does not place goes to a last group, so no
    page is ever unreachable from the home page (the spec's own test wants none there)."""
    if not path.is_file():
        return [("Topics", "", list(topics))]
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GenerateError(f"{path}: invalid YAML: {exc}") from exc
    groups = data.get("groups") if isinstance(data, dict) else None
    if not isinstance(groups, list):
        raise GenerateError(f"{path}: expected a mapping with 'groups', a list of "
                            "{title, question, topics}")
    found: list[tuple[str, str, list[str]]] = []
    placed: dict[str, str] = {}
    for number, group in enumerate(groups, 1):
        if not isinstance(group, dict) or not isinstance(group.get("title"), str) \
                or not isinstance(group.get("topics"), list):
            raise GenerateError(f"{path}: group {number} needs a 'title' and a list 'topics'")
        title = " ".join(group["title"].split())
        members = []
        for topic in group["topics"]:
            if topic in placed:
                raise GenerateError(f"{path}: topic {topic!r} is in groups {placed[topic]!r} "
                                    f"and {title!r}; place it once")
            placed[topic] = title
            # A spec folder with fewer case files (a subset, a test's) keeps the same groups.
            if topic in topics:
                members.append(topic)
        if members:
            found.append((title, str(group.get("question") or ""), members))
    rest = [topic for topic in topics if topic not in placed]
    if rest:
        found.append(("Other topics", "", rest))
    return found


def _topics_data(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GenerateError(f"{path}: invalid YAML: {exc}") from exc
    return data if isinstance(data, dict) else {}


def plain_title(topic: str) -> str:
    """A topic's file name as words, for a topic `topics.yaml` gives no title:
    `inplace_and_views` reads "Inplace and views"."""
    return topic.replace("_", " ").capitalize()


def topic_titles(path: Path, topics: list[str]) -> dict[str, str]:
    """The `titles` of `topics.yaml` (topic -> the readable title of its page), checked: each
    a topic of the spec and a non-empty line. A topic without one is titled by `plain_title`."""
    titles = _topics_data(path).get("titles") or {}
    if not isinstance(titles, dict):
        raise GenerateError(f"{path}: 'titles' must map each topic to its page's title")
    found: dict[str, str] = {}
    for topic, title in titles.items():
        if not isinstance(title, str) or not title.strip():
            raise GenerateError(f"{path}: the title of topic {topic!r} must be a non-empty "
                                "string")
        if topic in topics:
            found[str(topic)] = " ".join(title.split())
    return found


def case_subjects(path: Path, cases: Sequence[Case], known_topics: set[str]) -> dict[str, str]:
    """The `subjects` of `topics.yaml`: for each topic filed by origin (the rules mutation
    testing and fuzzing found), each of its cases -> the topic whose subject it is.

    Checked: every case of such a topic is placed, once, under a topic of the spec that is not
    itself filed by origin; every id placed is a case of the topic it is listed under. A spec
    folder holding only some case files (a subset) is checked for the topics it has."""
    data = _topics_data(path)
    subjects = data.get("subjects") or {}
    # A subset of the spec (fewer case files) still checks names against every topic the home
    # page groups; it places a case only under a topic it has a page for.
    grouped = {str(topic) for group in data.get("groups") or [] if isinstance(group, dict)
               for topic in group.get("topics") or []}
    if not isinstance(subjects, dict):
        raise GenerateError(f"{path}: 'subjects' must map each topic filed by origin to "
                            "{case id: subject topic}")
    by_topic: dict[str, list[str]] = defaultdict(list)
    for case in cases:
        by_topic[case.topic].append(case.id)
    found: dict[str, str] = {}
    for origin, placed in subjects.items():
        if not isinstance(placed, dict):
            raise GenerateError(f"{path}: subjects of {origin!r} must map each case id to the "
                                "topic whose subject it is")
        loaded = set(by_topic.get(origin, ()))
        if not loaded:
            continue  # a subset of the spec without this topic's file
        for case_id, subject in placed.items():
            if not str(case_id).startswith(f"{origin}."):
                raise GenerateError(f"{path}: {case_id!r} is listed under subjects of "
                                    f"{origin!r} but is not a case of that topic")
            if case_id not in loaded:
                raise GenerateError(f"{path}: subjects of {origin!r} place {case_id!r}, which "
                                    f"is not a case of cases/{origin}.yaml")
            if subject not in known_topics | grouped or subject in subjects:
                raise GenerateError(f"{path}: {case_id!r} is placed under {subject!r}, which is "
                                    "not a topic of cases/ (or is itself filed by origin)")
            if subject in known_topics:
                found[case_id] = subject
        missing = [case_id for case_id in by_topic.get(origin, ()) if case_id not in placed]
        if missing:
            raise GenerateError(f"{path}: place every case of {origin!r} under its subject; "
                                f"missing: {', '.join(missing)}")
    return found


def _referenced_by(cases: Iterable[Case]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for case in cases:
        targets = list(case.see_also) + (list(case.fix.cases) if case.fix else [])
        for target in dict.fromkeys(targets):
            found[target].append(case.id)
    return dict(found)


def _leading_comment(path: Path) -> list[tuple[str, str]]:
    """The comment a YAML file opens with, as blocks: ("p", paragraph) or ("li", list item).

    A line starting with `- ` opens a list item and indented lines continue it, as the
    authors write them; any other line continues the paragraph or, after a list, opens one.
    """
    if not path.is_file():
        return []
    blocks: list[tuple[str, str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        body = line[1:]
        stripped = body.strip()
        if not stripped:
            blocks.append(("", ""))
        elif stripped.startswith("- "):
            blocks.append(("li", stripped[2:]))
        elif blocks and blocks[-1][0] == "li" and body.startswith("   "):
            blocks[-1] = ("li", blocks[-1][1] + " " + stripped)
        elif blocks and blocks[-1][0] == "p":
            blocks[-1] = ("p", blocks[-1][1] + " " + stripped)
        else:
            blocks.append(("p", stripped))
    return [block for block in blocks if block[0]]


def blocks_rst(blocks: Sequence[tuple[str, str]]) -> str:
    out = []
    for index, (kind, body) in enumerate(blocks):
        if kind == "li":
            out.append(f"- {rst.text(body)}")
            if index + 1 == len(blocks) or blocks[index + 1][0] != "li":
                out.append("")
        else:
            out += [rst.text(body), ""]
    return "\n".join(out) + "\n"


def summary(blocks: Sequence[tuple[str, str]]) -> str:
    """The first sentence of the first paragraph."""
    first = next((body for kind, body in blocks if kind == "p"), "")
    if not first:
        return ""
    sentence = re.split(r"(?<=[a-z0-9)\]'\"])\.\s+(?=[A-Z])", first, maxsplit=1)[0]
    return sentence.rstrip(".") + "."

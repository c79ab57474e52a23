"""DialogManager: one caller turn in, one Reply (with streamed sentences) out.

Decision order for a turn (first match wins):

1. the bot just offered a colleague: "yes" hands off, "no" asks what else;
2. the caller asks for a human (rule or classifier) → handoff;
3. greetings, thanks, goodbyes → canned replies;
4. the bot just asked for a slot and this turn fills it → answer the waiting question;
5. follow-ups ("and how long does it take?") are retrieved together with the last question;
6. retrieval; below LOW_CONFIDENCE → offer a colleague, never an invented answer;
7. an answer template needing a slot we lack (``{order_number}``) → ask for it;
8. an LLM, when configured, rephrases from the retrieved passages; if it fails or misses its
   budget before its first sentence, the knowledge-base answer is spoken instead.

Each turn adds the caller's words to the call's history (:attr:`DialogState.history`);
:meth:`DialogManager.note` adds the lines the dialog did not choose (the bot's spoken answer,
a human agent's words during a takeover), and the LLM prompt shows them, each as its speaker's.

All CPU work of a turn (embedding, intent, slots, BM25) runs as one executor job; the event
loop only awaits it, the session store and the LLM stream.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from pathlib import Path

import structlog

from .embed import Embedder
from .intents import UNKNOWN, IntentClassifier, IntentResult
from .kb import KbEntry, KnowledgeBase
from .llm import NO_ANSWER, LlmClient, LlmError, build_messages
from .retrieval import LOW_CONFIDENCE, HybridRetriever, Retriever
from .slots import display, extract_slots
from .state import CallLocks, DialogState, MemorySessionStore, SessionStore
from .text import detect_lang, split_sentences, warm_up

log = structlog.get_logger(__name__)

SOURCES = ("kb", "llm", "fallback", "handoff", "clarify", "greeting")
_SOCIAL = ("greeting", "thanks", "goodbye")

_SAY: dict[tuple[str, str], str] = {
    (
        "fallback",
        "en",
    ): "I'm not sure about that — would you like me to connect you to a colleague?",
    ("fallback", "zh"): "这个问题我不太确定，需要为您转接人工客服吗？",
    ("handoff", "en"): "Of course, I'm connecting you to a colleague now.",
    ("handoff", "zh"): "好的，正在为您转接人工客服。",
    ("greeting", "en"): "Hello! How can I help you today?",
    ("greeting", "zh"): "您好！请问有什么可以帮您？",
    ("thanks", "en"): "You're welcome! Is there anything else I can help with?",
    ("thanks", "zh"): "不客气！还有其他可以帮您的吗？",
    ("goodbye", "en"): "Thank you for calling. Goodbye!",
    ("goodbye", "zh"): "感谢您的来电，再见！",
    ("declined", "en"): "No problem. What else can I help you with?",
    ("declined", "zh"): "好的。还有什么可以帮您？",
    ("what", "en"): "Sorry, what can I help you with?",
    ("what", "zh"): "不好意思，请问有什么可以帮您？",
    ("ask:order_number", "en"): "What's your order number?",
    ("ask:order_number", "zh"): "请问您的订单号是多少？",
    ("ask:phone", "en"): "What's the phone number on your account?",
    ("ask:phone", "zh"): "请问您账户绑定的手机号是多少？",
    ("ask:date", "en"): "Which date do you mean?",
    ("ask:date", "zh"): "请问是哪一天？",
    ("ask:amount", "en"): "What amount was it?",
    ("ask:amount", "zh"): "请问金额是多少？",
}
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_FOLLOWUP_EN = re.compile(
    r"^\s*(and|also|so|what about|how about|then)\b|\b(it|that|this|they|them)\b", re.I
)
_FOLLOWUP_ZH = re.compile(r"^\s*(那|那么|还有|另外|然后)|它|这个|那个")


def say(key: str, lang: str) -> str:
    return _SAY.get((key, lang)) or _SAY[(key, "en")]


@dataclass(frozen=True, slots=True)
class Reply:
    """The bot's answer to one caller turn."""

    intent: str
    """Classified intent of the turn (or of the question a slot answer completed)."""
    slots: Mapping[str, str]
    """All slots known for the call after this turn (normalised; see slots.py)."""
    source: str
    """One of SOURCES: where the words come from."""
    confidence: float
    """Retrieval confidence of the answer (1.0 for rule-based replies)."""
    handoff: bool
    """True when the call should go to a human agent now."""
    kb_ids: tuple[str, ...]
    """Knowledge-base entries the answer is grounded on."""
    sentences: AsyncIterator[str]
    """The answer, sentence by sentence (LLM replies stream)."""
    lang: str = "en"
    """Language of the answer."""
    chosen_ms: float = 0.0
    """Time from the turn's text to this Reply (answer chosen; first LLM sentence included)."""

    async def aclose(self) -> None:
        """Stop the answer (barge-in): closes an LLM stream still in flight."""
        aclose = getattr(self.sentences, "aclose", None)
        if aclose is not None:
            await aclose()


@dataclass(slots=True)
class _Plan:
    source: str
    intent: str
    state: DialogState
    lang: str
    confidence: float = 1.0
    handoff: bool = False
    sentences: list[str] = field(default_factory=list)
    hits: list[KbEntry] = field(default_factory=list)
    query: str = ""


async def _iterate(items: list[str]) -> AsyncIterator[str]:
    for s in items:
        yield s


class DialogManager:
    """Chooses and streams answers; per-call memory lives in ``store``."""

    def __init__(
        self,
        retriever: Retriever,
        intents: IntentClassifier,
        embedder: Embedder | None = None,
        *,
        store: SessionStore | None = None,
        llm: LlmClient | None = None,
        executor: Executor | None = None,
        low_confidence: float = LOW_CONFIDENCE,
        today: Callable[[], dt.date] = dt.date.today,
    ) -> None:
        self.retriever = retriever
        self.intents = intents
        self.embedder = embedder if embedder is not None and embedder.ready else None
        self.store: SessionStore = store if store is not None else MemorySessionStore()
        self.llm = llm
        self.executor = executor
        self.low_confidence = low_confidence
        self.today = today
        self.ready = True
        self.error: str | None = None if self.embedder else "embedder unavailable: BM25 only"
        self._locks = CallLocks()

    @classmethod
    def build(
        cls,
        cache_dir: str | Path,
        *,
        kb_dir: str | Path | None = None,
        embedder: Embedder | None = None,
        **kwargs: object,
    ) -> DialogManager:
        """Load everything (blocking, ~2 s the first time): call it in an executor.

        ``kb_dir`` is an imported knowledge base; without it (or if it does not exist) the
        embedded retail KB is indexed under ``cache_dir``.
        """
        embedder = embedder or Embedder()
        warm_up()
        if kb_dir is not None and (Path(kb_dir) / "meta.json").exists():
            kb = KnowledgeBase.load(kb_dir)
        else:
            kb = KnowledgeBase.default(cache_dir, embedder)
        intents = IntentClassifier(embedder, kb_entries=kb.entries, cache_dir=cache_dir)
        return cls(HybridRetriever(kb, embedder), intents, embedder, **kwargs)  # type: ignore[arg-type]

    async def end_call(self, call_id: str) -> None:
        await self.store.delete(call_id)

    async def note(self, call_id: str, speaker: str, text: str, *, lang: str | None = None) -> None:
        """Add a line the dialog did not produce to the call's history: the bot's spoken
        answer, what the caller or a human agent said during a takeover (``speaker`` from
        :data:`~kefu.ai_bridge.dialog.state.SPEAKERS`). Nothing is answered."""
        async with self._locks(call_id):
            state = await self.store.get(call_id)
            if state is None:
                state = DialogState(call_id=call_id, lang=lang or detect_lang(text))
            await self.store.put(state.with_line(speaker, text))

    async def respond(self, call_id: str, text: str, *, lang: str | None = None) -> Reply:
        t0 = time.perf_counter()
        lang = lang or detect_lang(text)
        async with self._locks(call_id):  # a line noted meanwhile is not lost
            state = await self.store.get(call_id) or DialogState(call_id=call_id, lang=lang)
            loop = asyncio.get_running_loop()
            plan = await loop.run_in_executor(self.executor, self._plan, text, lang, state)
            plan.state = plan.state.with_line("caller", text)
            blog = log.bind(call_id=call_id, turn_id=plan.state.turns)
            sentences: AsyncIterator[str]
            if plan.source == "llm":
                plan, sentences = await self._llm_answer(plan, state.history, blog)
            else:
                sentences = _iterate(plan.sentences)
            await self.store.put(plan.state)
        chosen_ms = (time.perf_counter() - t0) * 1000
        blog.info(
            "dialog.answer_chosen",
            source=plan.source,
            intent=plan.intent,
            confidence=round(plan.confidence, 3),
            ms=round(chosen_ms, 1),
        )
        return Reply(
            intent=plan.intent,
            slots=plan.state.slot_dict(),
            source=plan.source,
            confidence=plan.confidence,
            handoff=plan.handoff,
            kb_ids=tuple(e.id for e in plan.hits[:1])
            if plan.source == "kb"
            else tuple(e.id for e in plan.hits),
            sentences=sentences,
            lang=plan.lang,
            chosen_ms=chosen_ms,
        )

    # --- synchronous planning (runs in the executor) -----------------------------------

    def _plan(self, text: str, lang: str, state: DialogState) -> _Plan:
        expect = state.pending_slot or None
        new_slots = extract_slots(text, today=self.today(), expect=expect)
        # Rules first: formulaic turns ("yes", "agent") then skip the ~8 ms embedding.
        vector = None
        rule = self.intents.rule(text, lang)
        if rule is not None:
            ir = IntentResult(rule, 1.0, "rule", lang)
        else:
            if self.embedder and lang == "en":
                vector = self.embedder.embed_one(text)
            ir = self.intents.classify(text, lang=lang, vector=vector)
        st = replace(state.with_slots(new_slots), lang=lang, turns=state.turns + 1)
        cleared = replace(
            st, pending_slot="", pending_intent="", pending_query="", offered_handoff=False
        )

        def canned(
            source: str,
            key: str,
            intent: str,
            *,
            handoff: bool = False,
            confidence: float = 1.0,
            state: DialogState = cleared,
        ) -> _Plan:
            return _Plan(
                source, intent, state, lang, confidence, handoff, sentences=[say(key, lang)]
            )

        if state.offered_handoff and ir.intent in ("affirm", "deny"):
            if ir.intent == "affirm":
                return canned("handoff", "handoff", "human_agent", handoff=True)
            return canned("clarify", "declined", "deny")
        if ir.intent == "human_agent" and ir.method == "rule":
            return canned("handoff", "handoff", "human_agent", handoff=True)
        if ir.intent in _SOCIAL:
            return canned("greeting", ir.intent, ir.intent)

        query, intents, followup = text, {ir.intent} - {UNKNOWN}, False
        if state.pending_slot and state.pending_slot in new_slots:
            query, intents = state.pending_query, {state.pending_intent}
            ir = replace(ir, intent=state.pending_intent)
        elif state.last_query and self._is_followup(text, lang) and ir.method != "rule":
            # The fragment alone is ambiguous ("how long does it take?"): rank on the last
            # question plus the fragment, but without the fragment's (weak) intent vote.
            query, intents, followup = f"{state.last_query} {text}", set(), True
        elif ir.intent in ("affirm", "deny"):
            return canned("clarify", "what", ir.intent)

        qvec = vector if query == text else None
        if qvec is None and self.embedder and lang == "en":
            qvec = self.embedder.embed_one(query)
        hits = self.retriever.search(query, vector=qvec, lang=lang, k=10)
        best, conf = None, 0.0
        if hits:
            best, conf = hits[0].entry, hits[0].confidence
            # The classifier agreeing with a hit's intent is independent evidence: prefer
            # the best such hit among the top 10 and lift its confidence just over the line.
            for h in hits:
                if h.entry.intent and h.entry.intent in intents:
                    best, conf = h.entry, max(h.confidence, self.low_confidence + 0.1)
                    break
        if followup and best is not None:
            # Mixing in the last question dilutes coverage; the fragment on its own may
            # match the chosen entry much better.
            for h in self.retriever.search(text, vector=vector, lang=lang, k=10):
                if h.entry.id == best.id:
                    conf = max(conf, h.confidence)
            if ir.intent == UNKNOWN:
                ir = replace(ir, intent=best.intent)
        if best is None or conf < self.low_confidence:
            return canned(
                "fallback",
                "fallback",
                ir.intent,
                confidence=conf,
                state=replace(cleared, offered_handoff=True),
            )
        done = replace(
            cleared, last_intent=best.intent or ir.intent, last_query=query, last_kb_ids=(best.id,)
        )
        if best.intent == "human_agent":
            return _Plan(
                "handoff",
                "human_agent",
                done,
                lang,
                conf,
                True,
                split_sentences(best.answer),
                [best],
                query,
            )
        slots = st.slot_dict()
        missing = [n for n in _PLACEHOLDER.findall(best.answer) if n not in slots]
        if missing:
            asked = replace(
                cleared,
                pending_slot=missing[0],
                pending_intent=best.intent or ir.intent,
                pending_query=query,
            )
            return _Plan(
                "clarify",
                best.intent or ir.intent,
                asked,
                lang,
                conf,
                sentences=[say(f"ask:{missing[0]}", lang)],
            )
        answer = _PLACEHOLDER.sub(lambda m: display(slots, m[1], lang) or m[0], best.answer)
        passages = [best] + [h.entry for h in hits if h.entry is not best][:2]
        source = "llm" if self.llm is not None else "kb"
        return _Plan(
            source,
            best.intent or ir.intent,
            done,
            lang,
            conf,
            False,
            split_sentences(answer),
            passages,
            query,
        )

    @staticmethod
    def _is_followup(text: str, lang: str) -> bool:
        if lang == "zh":
            return len(text) <= 12 and _FOLLOWUP_ZH.search(text) is not None
        return len(text.split()) <= 8 and _FOLLOWUP_EN.search(text) is not None

    # --- LLM path ----------------------------------------------------------------------

    async def _llm_answer(
        self,
        plan: _Plan,
        history: tuple[tuple[str, str], ...],
        blog: structlog.typing.FilteringBoundLogger,
    ) -> tuple[_Plan, AsyncIterator[str]]:
        assert self.llm is not None
        messages = build_messages(plan.query, plan.hits[:3], plan.lang, history)
        stream = self.llm.stream_sentences(messages)
        # The client enforces the first-token deadline; this outer guard also bounds the wait
        # for the first full sentence so a trickling server cannot stall the turn.
        guard = self.llm.config.first_token_timeout_s + 1.0
        try:
            first = await asyncio.wait_for(anext(stream), guard)
        except (LlmError, StopAsyncIteration, TimeoutError) as exc:
            await stream.aclose()
            blog.warning("dialog.llm_fallback", error=str(exc) or type(exc).__name__)
            return replace(plan, source="kb", hits=plan.hits[:1]), _iterate(plan.sentences)
        except BaseException:
            await stream.aclose()
            raise
        if first.strip().startswith(NO_ANSWER):
            await stream.aclose()
            st = replace(plan.state, offered_handoff=True, last_query="", last_kb_ids=())
            return replace(plan, source="fallback", state=st, hits=[]), _iterate(
                [say("fallback", plan.lang)]
            )
        return plan, self._continue(first, stream, blog)

    @staticmethod
    async def _continue(
        first: str, stream: AsyncGenerator[str, None], blog: structlog.typing.FilteringBoundLogger
    ) -> AsyncIterator[str]:
        try:
            yield first
            async for s in stream:
                yield s
        except LlmError as exc:
            # Sentences already spoken cannot be unsaid; end the answer where it broke.
            blog.warning("dialog.llm_broke_midway", error=str(exc))
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()

"""The service's requests and answers: pydantic models with strict types and the limits they check."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    model_validator,
)
from typing_extensions import TypeAliasType

from dupq.collection.backend import FIELD_PATTERN, MAX_FIELDS, MAX_VALUES, NUMBERS, TEXT_PATTERN
from dupq.collection.rows import holds_nul
from dupq.core.errors import DupqError
from dupq.data.questions import KEY_PATTERN, MAX_KEY, MAX_QUESTION, check_question
from dupq.modeling.verdict import clip_cosines

MAX_K = 100  # results of one search
MAX_EXCLUDED = 100  # keys one search leaves out
MAX_PAGE = 1_000  # questions of one page of GET /questions


def _question(text: str) -> str:
    try:
        return check_question(text)  # the rule of every entry point: valid Unicode, at least one word
    except DupqError as e:
        raise ValueError(str(e).removeprefix("the question ")) from None


# The schema's words for check_question's rule (one character neither blank nor ASCII punctuation),
# so that schema-driven clients and fuzzers know it; _question enforces it, with a readable message.
# The class lists every character that str.split() or the punctuation strip removes.
WORD = r"[^\u0009-\u000d\u001c-\u002f\u003a-\u0040\u005b-\u0060\u007b-\u007e\u0085\u00a0\u1680\u2000-\u200a\u2028-\u2029\u202f\u205f\u3000]"


STRICT = ConfigDict(extra="forbid", strict=True)  # "3" is not 3, true is not 1


def _json_integer(value: Any) -> Any:
    """JSON Schema's integer: 3 or 3.0, never true or "3" (an integral float is then made an int)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("must be a JSON integer")
    return value


Question = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUESTION,
        description="A question: 1 to 1,000 characters, with at least one word.",
        json_schema_extra={"pattern": WORD},
    ),
    AfterValidator(_question),
]


def _cosine(x: float) -> float:
    """``x`` kept in [-1, 1] by clip_cosines (float32 rounding can reach 1.0000001); a cosine within it, as nearly
    every one is, passes without NumPy's call, which cost more than the rest of a hit's validation (ten a search)."""
    return x if -1.0 <= x <= 1.0 else float(clip_cosines(x))


Score = Annotated[float, AfterValidator(_cosine)]

# Metadata is any JSON object without U+0000 in a string or a name (dupq.collection.rows says why). The schema
# states it with a recursive JSON value, so that a schema-valid body is never refused; the validation is one walk
# (holds_nul) over the object, a twentieth of what the recursive union would cost pydantic.
NO_NUL = {"pattern": "^[^\\x00]*$"}
MetadataValue = TypeAliasType(
    "MetadataValue",
    Union[  # noqa: UP007 (a recursive alias needs the names as strings, which | does not take)
        None,
        StrictBool,
        StrictInt,
        StrictFloat,
        Annotated[str, Field(json_schema_extra=NO_NUL)],
        list["MetadataValue"],
        Annotated[dict[str, "MetadataValue"], Field(json_schema_extra={"propertyNames": NO_NUL})],
    ],
)


def _no_nul(metadata: Any) -> Any:
    if holds_nul(metadata):
        raise ValueError("holds the character U+0000, which metadata may not")
    return metadata


Metadata = Annotated[
    dict[str, Any],
    BeforeValidator(
        _no_nul,
        json_schema_input_type=Annotated[dict[str, MetadataValue], Field(json_schema_extra={"propertyNames": NO_NUL})],
    ),
]
Key = Annotated[
    str, Field(min_length=1, max_length=MAX_KEY, pattern=KEY_PATTERN, description="Printable ASCII, no spaces.")
]  # check_key's rule (dupq.data.questions), as a schema says it


class SimilarityRequest(BaseModel):
    model_config = STRICT
    q1: Question
    q2: Question


class SimilarityResponse(BaseModel):
    similarity: Score  # cosine similarity of the two questions' vectors, in [-1, 1]
    probability: float | None  # calibrated P(duplicate); null for a model without a calibration
    duplicate: bool  # the similarity (or probability, see threshold_on) above the model's threshold
    threshold: float
    threshold_on: str  # "similarity" or "probability": what the threshold is compared with


# check_where's rule (dupq.collection.backend), as a schema says it: a filter's field names, values and sizes
FilterValue = (
    Annotated[str, Field(strict=True, pattern=TEXT_PATTERN)]
    | StrictBool
    | Annotated[int, Field(strict=True, gt=NUMBERS[0], lt=NUMBERS[1])]
    | Annotated[float, Field(strict=True, allow_inf_nan=False, gt=NUMBERS[0], lt=NUMBERS[1])]
)
FilterValues = Annotated[list[FilterValue], Field(min_length=1, max_length=MAX_VALUES)]
Filter = Annotated[
    dict[Annotated[str, Field(pattern=FIELD_PATTERN)], FilterValue | FilterValues],
    # a name outside the pattern is no field (JSON Schema's patternProperties alone would let it through)
    Field(max_length=MAX_FIELDS, json_schema_extra={"additionalProperties": False}),
]


# A filter in a query string, the command line's way: where=FIELD=VALUE, repeated (a field twice: either value;
# a value that reads as a number or boolean also matches that: dupq.collection.backend.where_from_text).
WhereItem = Annotated[str, Field(pattern=FIELD_PATTERN[:-1] + "=" + TEXT_PATTERN[1:])]


class SearchRequest(BaseModel):
    model_config = STRICT
    question: Question
    k: Annotated[int, Field(strict=False), BeforeValidator(_json_integer)] = Field(
        10, ge=1, le=MAX_K, description="How many stored questions to return (1 to 100)."
    )
    filter: Filter | None = Field(
        None,
        description='Only questions whose metadata match: {"field": value, "other": [v1, v2]} (equal; a list: any of).',
    )
    exclude: Annotated[list[Key], Field(max_length=MAX_EXCLUDED)] = Field(
        default_factory=list,
        description="Keys of questions to leave out (a ticket's own key, to find its duplicates and not itself).",
    )
    rerank: bool | None = Field(
        None,
        description="Order and judge the candidates by the collection's reranker (default: where it has one); false: the model's order.",
    )


class HitOut(BaseModel):
    id: int
    key: str | None  # the key it was stored under (null: added without one)
    duplicate_of: str | None  # the key of its canonical question, where a moderator marked it a duplicate
    text: str
    score: Score  # cosine similarity to the question
    probability: float | None  # calibrated P(duplicate); null without a calibration
    duplicate: bool  # in the duplicate tier
    tier: Literal["suggest", "duplicate"] | None = Field(
        description="duplicate: safe to act on; suggest: worth a look; null: neither."
    )
    metadata: dict[str, Any]
    ranked_by: str  # which model ordered and judged it: "model" (the collection's) or "reranker"


class Tiers(BaseModel):
    suggest: float  # a hit whose score is above it is worth a look
    duplicate: float  # above it, safe to act on (precision >= 0.95 where the tiers were fitted)
    on: str  # the score they apply to: probability or similarity


class SearchResponse(BaseModel):
    question: str
    threshold: float  # the duplicate tier's
    threshold_on: str
    tiers: Tiers
    results: list[HitOut]


# A pending question needs a key: a moderator's decision names it (the schema says so, as the validator does).
KEYED_WHEN_PENDING = {
    "if": {"properties": {"pending": {"const": True}}, "required": ["pending"]},
    "then": {"required": ["key"], "properties": {"key": {"type": "string"}}},  # a key, not null
}


class AddRequest(BaseModel):
    model_config = ConfigDict(**STRICT, json_schema_extra=KEYED_WHEN_PENDING)
    text: Question
    metadata: Metadata = Field(default_factory=dict, description="Any JSON object stored with the question.")
    key: Key | None = Field(
        None, description="Your id for the question: a key stored already stores nothing and answers its id."
    )
    pending: bool = Field(
        False,
        description="Wait in the review queue (GET /queue), found by no search until a moderator decides; needs a key.",
    )

    @model_validator(mode="after")
    def _keyed(self):
        if self.pending and self.key is None:
            raise ValueError("a pending question needs a key (a moderator's decision names it)")
        return self


def fields_given(body: BaseModel, least: int, most: int, names: tuple[str, ...] | None = None) -> BaseModel:
    """``body`` if it names ``least`` to ``most`` of its fields (of ``names``; default: all), else the ValueError
    that makes it a 422.

    The rule the schema states (``minProperties``, ``maxProperties``, ``oneOf``) enforced as the schema says,
    so that ``{}`` is the invalid body the OpenAPI document promises, not a 400 of the library.
    """
    names = names or tuple(type(body).model_fields)
    given = [name for name in names if getattr(body, name) is not None]
    if not least <= len(given) <= most:
        names = " or ".join(names)
        wanted = f"one of {names}" if most == 1 else f"at least one of {names}"
        raise ValueError(f"give {wanted}" + (f", not {len(given)}" if given else ""))
    return body


class UpdateRequest(BaseModel):
    # a text, metadata or both (the schema says so: a request without either is not a valid one)
    model_config = ConfigDict(**STRICT, json_schema_extra={"minProperties": 1})
    text: Question = Field(None, description="The question's new text (the old text is found no more).")
    metadata: Metadata = Field(None, description="Its new metadata (replaces the stored metadata).")

    @model_validator(mode="after")
    def _some(self):
        return fields_given(self, 1, 2)


DECIDED = ("duplicate_of", "not_duplicate_of", "keep")


class DecisionRequest(BaseModel):
    # exactly one of the three (the schema says so: a request with none or two is not a valid one)
    model_config = ConfigDict(**STRICT, json_schema_extra={"oneOf": [{"required": [name]} for name in DECIDED]})
    duplicate_of: Key = Field(None, description="The key of the canonical question this one duplicates.")
    not_duplicate_of: Key | Annotated[list[Key], Field(min_length=1, max_length=MAX_K)] = Field(
        None, description="The key of a question this one does not duplicate (a list: it duplicates none of them)."
    )
    keep: Literal[True] = Field(None, description="A new question: out of the review queue, no pair judged.")
    change: StrictBool = Field(
        False,
        description="This decision replaces an earlier one it contradicts (recorded as a change, with what it was "
        "and when); without it such a decision is refused with 409.",
    )

    @model_validator(mode="after")
    def _one(self):
        return fields_given(self, 1, 1, DECIDED)


class Changed(BaseModel):
    key: str
    id: int | None  # its id afterwards (null once removed)
    count: int  # questions in the collection afterwards
    metadata: dict[str, Any] | None = None  # its metadata after a decision or an update
    text: str | None = None  # its text after an update


class StoredQuestion(BaseModel):
    id: int
    key: str | None  # null: added without one
    text: str
    metadata: dict[str, Any]
    pending: bool = False  # waiting in the review queue: found by no search until a moderator decides on it


class QuestionPage(BaseModel):
    questions: list[StoredQuestion]  # in id order
    next_cursor: int | None  # the cursor of the next page; null: this is the last


class Decision(BaseModel):
    key: str  # the judged question
    other: str  # the question it was judged against
    text: str
    other_text: str
    duplicate: bool  # true: a duplicate of other (its canonical question); false: judged distinct


class Decisions(BaseModel):
    decisions: list[Decision]


class AddResponse(BaseModel):
    id: int
    count: int  # questions in the collection after this one


class Health(BaseModel):
    status: str
    questions: int
    threshold: float
    threshold_on: str
    calibration: dict | None = None  # what judges the hits: source (collection / model), fitted_on, fitted_by


class Candidate(HitOut):
    """A likely duplicate of a question in the review queue: a search's hit, with what the page shows beside it."""

    shared: list[str]  # the words the two questions share (the commonest English ones left out)
    # the tiers of a verdict (suggest / duplicate) arrive with HitOut's own fields: nothing to add here


class QueuedQuestion(BaseModel):
    id: int
    key: str | None
    text: str
    category: str | None  # its metadata's value of the queue's field (default "category") as text; null without one
    metadata: dict[str, Any]
    candidates: list[Candidate]  # its likely duplicates, best first (pending questions left out)


class QueuePage(BaseModel):
    total: int  # questions waiting that match the filter
    page: int
    size: int
    field: str  # the metadata field the category filter reads
    categories: dict[str, int]  # every value of that field among the waiting questions, and how many hold it
    items: list[QueuedQuestion]


class PastDecision(BaseModel):
    key: str
    text: str
    action: Literal["duplicate", "distinct", "new"]  # a duplicate of keys[0], of none of keys, or kept as new
    keys: list[str]
    by: str | None  # the moderator's name, as the page (or the X-Moderator header) gave it
    at: str  # when, in ISO 8601 (UTC)


class PastDecisions(BaseModel):
    decisions: list[PastDecision]  # the latest first

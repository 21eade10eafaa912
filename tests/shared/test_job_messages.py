"""The jobs' messages (issue 34): one model per kind, sent as JSON and read back as it was."""

from __future__ import annotations

import json

import pytest

from shared import queues
from shared.job_messages import Export, Pretile, Probe, Sweep
from shared.queues import EXPORT, PRETILE, JobKind
from shared.seeding.coverage import Coverage

KINDS = [value for value in vars(queues).values() if isinstance(value, JobKind)]
SAMPLES = {
    "probe": Probe(3, 10, 0),
    "raster-config": queues.RASTER_CONFIG.message("a/b.tif", "en", "/api-user", False),
    "raster-compress": queues.RASTER_COMPRESS.message("a/b.tif"),
    "pretile": Pretile("s", "en", 2, 5, False, True, "webp@2x", None, 1.5, 3.0, "old"),
    "speed-test": queues.SPEED_TEST.message("s", "en"),
    "export": Export("s", False, "pmtiles", "png", None, 0, 4, "en"),
    "truncate": Sweep("s", False, {"type": "box"}, 0, 4, ["png"], None, ["file", "s3"]),
    "expire": Sweep("t", True, {"type": "list"}, 3, 9, rerender=True),
}


def test_every_kind_has_a_task_of_its_queue_and_a_sample() -> None:
    assert sorted(kind.kind for kind in KINDS) == sorted(SAMPLES)
    assert len({kind.task for kind in KINDS}) == len(KINDS)
    for kind in KINDS:
        assert kind.task.split(".")[0] in queues.QUEUES


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_a_message_is_read_back_as_it_was_sent_through_json(kind: JobKind) -> None:  # type: ignore[type-arg]
    message = SAMPLES[kind.kind]
    assert isinstance(message, kind.message)
    sent = json.loads(json.dumps(message.params()))  # as Celery and the job record carry it
    assert kind.read(sent) == message


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_a_key_the_model_lacks_is_refused(kind: JobKind) -> None:  # type: ignore[type-arg]
    with pytest.raises(TypeError):
        kind.read({**SAMPLES[kind.kind].params(), "dryrun": 1})


def test_a_field_added_later_reads_from_a_message_of_before() -> None:
    before = {"style": "s", "lang": "en", "minzoom": 0, "maxzoom": 3, "refresh": False, "s3": False}
    run = PRETILE.read(before)
    assert (run.variant, run.coverage, run.resume_of) == ("png", None, None)


def test_an_export_sent_before_coverages_reads_its_box_as_a_coverage() -> None:
    sent = {**SAMPLES["export"].params(), "bbox": [1.0, 2.0, 3.0, 4.0]}
    del sent["coverage"]
    job = EXPORT.read(sent)
    assert job.coverage is not None
    assert Coverage.from_json(job.coverage).bounds == (1.0, 2.0, 3.0, 4.0)

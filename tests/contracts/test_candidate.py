"""The candidate contract: the one layout check, the one folder reader, the one content key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.contracts.candidate import (
    HEADER_SUFFIXES,
    KERNEL_SUFFIXES,
    MAX_CANDIDATE_BYTES,
    MODEL_NEW_FILE,
    UNIT_SUFFIXES,
    CandidateFileError,
    CandidateForm,
    CandidateSource,
    is_kernel_file,
    is_unit,
    layout_error,
    read_candidate,
    read_candidate_dir,
)
from cuda_agent.contracts.common import MAX_CANDIDATE_FILES

MODEL_NEW = "class ModelNew: pass\n"


def project(**files: str) -> CandidateSource:
    return CandidateSource(form=CandidateForm.PROJECT, files={MODEL_NEW_FILE: MODEL_NEW, **files})


def test_every_kernel_suffix_is_a_unit_or_a_header() -> None:
    assert set(KERNEL_SUFFIXES) == set(UNIT_SUFFIXES) | set(HEADER_SUFFIXES)
    assert not set(UNIT_SUFFIXES) & set(HEADER_SUFFIXES)
    for suffix in KERNEL_SUFFIXES:
        assert is_kernel_file(f"kernels/a{suffix}") and is_kernel_file(f"kernels/deep/er/a{suffix}")
        assert not is_kernel_file(f"a{suffix}")  # only below kernels/
        assert is_unit(f"kernels/a{suffix}") is (suffix in UNIT_SUFFIXES)


def test_a_project_with_a_file_of_every_allowed_suffix_is_valid() -> None:
    candidate = project(**{f"kernels/sub/k{suffix}": "" for suffix in KERNEL_SUFFIXES})
    assert layout_error(candidate) is None
    assert layout_error(CandidateSource(form=CandidateForm.KERNELBENCH, files={MODEL_NEW_FILE: MODEL_NEW})) is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("/etc/passwd", "must be relative"),
        ("kernels/../../x.cu", "must be relative"),
        ("kernels//a.cu", "must be relative"),  # not normalized
        ("./kernels/a.cu", "must be relative"),
        ("kernels\\a.cu", "must be relative"),
        ("kernels/a.cc", "project files are"),  # a suffix outside the contract
        ("kernels/a.py", "project files are"),
        ("kernels/a", "project files are"),
        ("a.cu", "project files are"),  # a kernel file outside kernels/
        ("torch.py", "project files are"),  # a module that would shadow an import of model_new.py
    ],
)
def test_layout_errors_name_the_file(name: str, expected: str) -> None:
    problem = layout_error(project(**{name: "int x;"}))
    assert problem is not None and expected in problem and (name in problem or repr(name) in problem)


def test_layout_requires_model_new_and_kernelbench_is_model_new_alone() -> None:
    missing = CandidateSource(form=CandidateForm.PROJECT, files={"kernels/a.cu": ""})
    assert layout_error(missing) == f"the candidate has no {MODEL_NEW_FILE}"
    extra = CandidateSource(form=CandidateForm.KERNELBENCH, files={MODEL_NEW_FILE: MODEL_NEW, "kernels/a.cu": ""})
    problem = layout_error(extra)
    assert problem is not None and "kernels/a.cu" in problem and "alone" in problem


def test_key_is_stable_under_dict_order_and_changes_with_content_and_form() -> None:
    files = {MODEL_NEW_FILE: MODEL_NEW, "kernels/a.cu": "A", "kernels/b.h": "B"}
    forward = CandidateSource(form=CandidateForm.PROJECT, files=files)
    backward = CandidateSource(form=CandidateForm.PROJECT, files=dict(reversed(list(files.items()))))
    assert list(forward.files) != list(backward.files) and forward.key == backward.key
    assert len(forward.key) == 64
    assert project(**{"kernels/a.cu": "A", "kernels/b.h": "B "}).key != forward.key
    assert CandidateSource(form=CandidateForm.KERNELBENCH, files=files).key != forward.key


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "candidate"
    (root / "kernels" / "sub").mkdir(parents=True)
    (root / MODEL_NEW_FILE).write_text(MODEL_NEW)
    (root / "kernels" / "add.cu").write_text("// add\n")
    (root / "kernels" / "sub" / "util.inl").write_text("// util\n")
    (root / "kernels" / "notes.txt").write_text("not a source\n")
    (root / "build.log").write_text("not a source\n")
    return root


def test_folder_reads_model_new_and_every_kernel_file(folder: Path) -> None:
    candidate = read_candidate_dir(folder)
    assert candidate.form is CandidateForm.PROJECT
    assert candidate.files == {
        MODEL_NEW_FILE: MODEL_NEW,
        "kernels/add.cu": "// add\n",
        "kernels/sub/util.inl": "// util\n",
    }
    assert layout_error(candidate) is None
    kernelbench = read_candidate_dir(folder, CandidateForm.KERNELBENCH)
    assert kernelbench.files == {MODEL_NEW_FILE: MODEL_NEW}
    # A project workspace whose kernels are not written yet is still a project candidate.
    for path in (folder / "kernels").rglob("*.*"):
        path.unlink()
    assert read_candidate_dir(folder, CandidateForm.PROJECT).form is CandidateForm.PROJECT
    assert read_candidate_dir(folder).form is CandidateForm.KERNELBENCH


def test_folder_leaves_out_links_and_fifos(folder: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.cu"
    secret.write_text("TOP-SECRET")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "hidden.cu").write_text("TOP-SECRET")
    (folder / "kernels" / "link.cu").symlink_to(secret)
    (folder / "kernels" / "linked_dir").symlink_to(outside, target_is_directory=True)
    os.mkfifo(folder / "kernels" / "pipe.h")  # reading it would block forever
    candidate = read_candidate_dir(folder)
    assert set(candidate.files) == {MODEL_NEW_FILE, "kernels/add.cu", "kernels/sub/util.inl"}
    assert "TOP-SECRET" not in "".join(candidate.files.values())
    # kernels/ itself a link to a folder outside: nothing below it is read.
    (folder / "kernels").rename(folder / "real_kernels")
    (folder / "kernels").symlink_to(outside, target_is_directory=True)
    assert set(read_candidate_dir(folder).files) == {MODEL_NEW_FILE}


def test_a_linked_model_new_is_refused_without_naming_the_host_path(folder: Path, tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.py"
    target.write_text(MODEL_NEW)
    (folder / MODEL_NEW_FILE).unlink()
    (folder / MODEL_NEW_FILE).symlink_to(target)
    with pytest.raises(CandidateFileError, match=MODEL_NEW_FILE) as raised:
        read_candidate_dir(folder)
    assert str(tmp_path) not in str(raised.value)


def test_folder_sources_are_bounded(folder: Path) -> None:
    (folder / "kernels" / "big.h").write_text("x" * MAX_CANDIDATE_BYTES)
    with pytest.raises(CandidateFileError, match=f"at most {MAX_CANDIDATE_BYTES} bytes"):
        read_candidate_dir(folder)
    (folder / "kernels" / "big.h").unlink()
    for i in range(MAX_CANDIDATE_FILES):
        (folder / "kernels" / f"k{i}.h").write_text("")
    with pytest.raises(CandidateFileError, match=f"limit of {MAX_CANDIDATE_FILES}"):
        read_candidate_dir(folder)


def test_read_candidate_takes_a_py_file_or_a_folder(folder: Path, tmp_path: Path) -> None:
    single = tmp_path / "mine.py"
    single.write_text(MODEL_NEW)
    assert read_candidate(single) == CandidateSource(form=CandidateForm.KERNELBENCH, files={MODEL_NEW_FILE: MODEL_NEW})
    assert read_candidate(folder) == read_candidate_dir(folder)
    with pytest.raises(CandidateFileError, match=r"must be a \.py file"):
        read_candidate(folder / "build.log")
    with pytest.raises(CandidateFileError, match="no such file or folder"):
        read_candidate(tmp_path / "missing")
    (folder / MODEL_NEW_FILE).unlink()
    with pytest.raises(CandidateFileError, match=f"^{folder}: {MODEL_NEW_FILE} does not exist"):
        read_candidate(folder)  # the CLI user is told which folder

"""Which template a family's generated test comes from, and where it lies. Kept apart from the
generator so the classifier (devicefit.select) can name a template without importing the
generator, which itself asks the classifier."""
from __future__ import annotations

from pathlib import Path

from devicefit.errors import DevicefitError

TEMPLATE_DIR = Path(__file__).parent / "templates"
# The families a template covers (each has hf_<family>_template.py.j2).
FAMILY_NAMES = ("embedding", "text_generation", "vision", "audio", "multimodal")


def template_file(template_name: str) -> Path:
    """The Jinja2 source of a template named as the classification names it."""
    return TEMPLATE_DIR / f"{template_name}.j2"


def template_for_family(family: str) -> str:
    return f"hf_{family}_template.py"


class TemplateExportError(DevicefitError, ValueError):
    """A template copy that would overwrite a different file."""


def export_templates(directory: str | Path, force: bool = False) -> list[Path]:
    """Copy the templates under the names the classification gives (`hf_embedding_template.py`,
    ...) and the base they extend, into `directory`: the guide's own code (spec 003) loads
    `classification["recommended_template"]` from `./templates` with a plain Jinja2 environment.
    A file already there with other content is kept (a user's edited template) unless `force`;
    one with devicefit's content is left alone. Returns the files written."""
    if not str(directory).strip():  # Path("") is ".": the templates went into the current directory
        raise TemplateExportError("the directory to export the templates to is empty: nothing written")
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise TemplateExportError(f"{out} is a file, not a directory: nothing written")
    copies = {source.name: source for source in TEMPLATE_DIR.glob("base*.j2")}
    copies.update({template_file(name).name.removesuffix(".j2"): template_file(name)
                   for name in (template_for_family(f) for f in FAMILY_NAMES)})
    blocked = [name for name in copies if (out / name).exists() and not (out / name).is_file()]
    if blocked:
        raise TemplateExportError(f"{out} holds directories named {', '.join(sorted(blocked))}, where templates go: nothing written")
    # A symbolic link where a template goes was written through: a dangling one created its
    # target, wherever it pointed, and --force overwrote the file a live one names.
    links = [name for name in copies if (out / name).is_symlink()]
    if links:
        raise TemplateExportError(f"{out} holds symbolic links named {', '.join(sorted(links))}, where templates go: "
                                  "nothing written (templates are written as files of their own)")
    clashes = [name for name, source in copies.items()
               if (out / name).exists() and (out / name).read_bytes() != source.read_bytes()]
    if clashes and not force:
        raise TemplateExportError(f"{out} already holds other versions of {', '.join(sorted(clashes))}; "
                                  "kept as they are (pass --force to overwrite them)")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, source in sorted(copies.items()):
        if (out / name).exists() and (out / name).read_bytes() == source.read_bytes():
            continue  # already devicefit's: left as it is (its time stamp too)
        (out / name).write_bytes(source.read_bytes())
        written.append(out / name)
    return written

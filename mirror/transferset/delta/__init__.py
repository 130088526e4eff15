"""The delta engine: a version carried as what its base lacks, published as an archive.

The whole story, pack to import, with a picture of the data: `docs/delta.md`. Both sides
use this package; it does no I/O of its own beyond the streams it is handed. Its modules
are private, by concern; what the rest of `mirror` uses is named here:

- `_formats`: the delta's formats (the file list, the delta blob, the members a splice writes);
- `_compression`: the compression a spliced delta names (a pinned libdeflate);
- `_inflate`, `_tarunits`, `_padding`, `_splice`: the spliced gzip (a base's compressed
  blocks kept, the changed members written anew);
- `_plan`: which base member a splice keeps, replaces or drops (both sides splice with it);
- `_publication`: how a version is published and what digest it must have: the decision;
- `_recipe`: a spliced archive recorded as copies of its base and literals, and replayed;
- `_contents`: the contents an archive is made of, kept once each in one work file.
"""

from mirror.transferset.delta._compression import current
from mirror.transferset.delta._contents import Contents
from mirror.transferset.delta._formats import (
    RECIPE_SEGMENTS,
    DeltaBlobWriter,
    DeltaContent,
    DeltaFileList,
    DeltaRecipePart,
    TreeFile,
    archive_mtime,
    check_tree,
    read_chunks,
    read_delta_blob,
    read_file_list,
)
from mirror.transferset.delta._inflate import gzip_file
from mirror.transferset.delta._plan import SplicePlan
from mirror.transferset.delta._publication import Publication, Way, publication
from mirror.transferset.delta._recipe import (
    MAX_SEGMENTS_BYTES,
    RecipeWriter,
    Segments,
    read_segments,
    replay,
)
from mirror.transferset.delta._splice import NewFile, splice_tree
from mirror.transferset.delta._tarunits import MemberData, TarUnits

__all__ = [
    "MAX_SEGMENTS_BYTES",
    "RECIPE_SEGMENTS",
    "Contents",
    "DeltaBlobWriter",
    "DeltaContent",
    "DeltaFileList",
    "DeltaRecipePart",
    "MemberData",
    "NewFile",
    "Publication",
    "RecipeWriter",
    "Segments",
    "SplicePlan",
    "TarUnits",
    "TreeFile",
    "Way",
    "archive_mtime",
    "check_tree",
    "current",
    "gzip_file",
    "publication",
    "read_chunks",
    "read_delta_blob",
    "read_file_list",
    "read_segments",
    "replay",
    "splice_tree",
]

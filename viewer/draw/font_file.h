// Which font files the viewer may hand to ImGui. Dear ImGui 1.86 accepts any readable file in
// AddFontFromFileTTF and asserts (aborting the program) only when the atlas is built and the font
// index is not found: a wrong ATTNLAB_FONT, or an fc-match answer that is not TrueType/OpenType,
// would kill the viewer. This checks the file's header first, as stb_truetype will read it.
#pragma once

#include <string>

namespace attnlab::viewer {

// True when `path` starts like a TrueType/OpenType font (0x00010000, "true", "OTTO") and `index`
// is 0, or like a collection ("ttcf") holding more than `index` fonts.
bool font_file_usable(const std::string& path, int index);

}  // namespace attnlab::viewer

#include "server/model/chat/chat_text.h"

#include <algorithm>

#include "server/model/tokenizer/utf8.h"

namespace tpserve::model {

void ChatText::AppendMarkup(std::string_view markup) { text_.append(markup); }

void ChatText::AppendContent(std::string_view content) {
  if (content.empty()) return;
  const size_t begin = text_.size();
  text_.append(content);
  if (!content_.empty() && content_.back().end == begin) {
    content_.back().end = text_.size();
  } else {
    content_.push_back({begin, text_.size()});
  }
}

void ChatText::Append(const ChatText& other) {
  const std::string_view src = other.text_;
  size_t done = 0;  // bytes of src already appended
  for (const ByteRange& r : other.content_) {
    AppendMarkup(src.substr(done, r.begin - done));
    AppendContent(src.substr(r.begin, r.end - r.begin));
    done = r.end;
  }
  AppendMarkup(src.substr(done));
}

ChatText ChatText::Stripped() const {
  const std::string_view all = text_;
  const std::string_view kept = PythonStrip(all);
  const size_t first = static_cast<size_t>(kept.data() - all.data());
  const size_t last = first + kept.size();
  ChatText out;
  size_t done = first;
  for (const ByteRange& r : content_) {
    const size_t begin = std::clamp(r.begin, first, last);
    const size_t end = std::clamp(r.end, first, last);
    if (begin >= end) continue;
    out.AppendMarkup(all.substr(done, begin - done));
    out.AppendContent(all.substr(begin, end - begin));
    done = end;
  }
  out.AppendMarkup(all.substr(done, last - done));
  return out;
}

}  // namespace tpserve::model

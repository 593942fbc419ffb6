// SPDX-FileCopyrightText: 2026 The loom authors
// SPDX-License-Identifier: Apache-2.0
// BERT WordPiece tokenizer: ids identical to transformers' slow BertTokenizer, plus offsets, truncation (of pairs as
// the Rust tokenizers library cuts them: what every BertTokenizer of transformers 5 does), padding.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loom/core/error.hpp"
#include "loom/io/basic_tokenizer.hpp"
#include "loom/io/vocab.hpp"

namespace loom::io {

/// Options of the tokenizer itself (what transformers takes in `BertTokenizer(...)`).
struct wordpiece_options {
  basic_options basic{};
  /// A word longer than this many code points (after normalisation and punctuation splitting) becomes one [UNK].
  std::size_t max_input_chars_per_word = 100;
  std::string unk_token = "[UNK]";
  std::string cls_token = "[CLS]";
  std::string sep_token = "[SEP]";
  std::string pad_token = "[PAD]";
  std::string mask_token = "[MASK]";
};

/// How a sequence (pair) longer than `max_length` is cut, as in transformers' `truncation=` (cuts at the right end).
enum class truncation {
  none,           ///< never cut
  longest_first,  ///< pairs: as tokenizers' LongestFirst (see truncate); one sequence: from its end
  only_first,     ///< remove from the first sequence only
  only_second,    ///< remove from the second sequence only
};

/// Padding, as in transformers' `padding=`: none, to the longest encoding of a batch, or to `max_length`.
enum class padding { none, longest, max_length };

struct encode_options {
  std::size_t max_length = 512;
  truncation truncate = truncation::longest_first;
  padding pad = padding::none;
  /// Add [CLS] ... [SEP] (... [SEP]).
  bool add_special_tokens = true;
};

/// One encoded example. All vectors have the same length.
struct encoding {
  std::vector<std::int32_t> input_ids;
  std::vector<std::int32_t> token_type_ids;  ///< 0 for [CLS] a [SEP], 1 for b [SEP]; 0 for padding
  std::vector<std::int32_t> attention_mask;  ///< 1 for tokens, 0 for padding
  std::vector<token_span> offsets;           ///< bytes of text a or b; {0,0} for special and padding tokens
  std::vector<std::int8_t> sequence_ids;     ///< 0 (text a), 1 (text b), -1 (special or padding)
  std::size_t size() const noexcept { return input_ids.size(); }
};

/// The BERT tokenizer (BasicTokenizer + greedy longest-match-first WordPiece with "##" continuations).
///
/// Identical ids to transformers' slow `BertTokenizer` (5.x: `BertTokenizerLegacy`) for the same vocabulary and
/// options; checked row by row on SST-2, MRPC and online_shopping_10_cats, plus an edge-case table and a sweep over
/// every assigned code point (tests/unit/io/text). Const member functions are thread-safe.
///
/// ```cpp
/// loom::io::wordpiece_tokenizer tok(loom::io::vocab::load("vocab.txt"));           // uncased defaults
/// loom::io::encoding e = tok.encode("The cat sat.", "A dog ran!", {.max_length = 128});
/// std::vector<loom::io::encoding> batch =
///     tok.encode_batch(texts, {}, {.max_length = 128, .pad = loom::io::padding::longest});
/// ```
class wordpiece_tokenizer {
 public:
  explicit wordpiece_tokenizer(vocab v, wordpiece_options options = {})
      : vocab_(std::move(v)), options_(std::move(options)), basic_(options_.basic, special_list(vocab_, options_)) {
    unk_id_ = required(options_.unk_token);
    cls_id_ = required(options_.cls_token);
    sep_id_ = required(options_.sep_token);
    pad_id_ = required(options_.pad_token);
    for (const auto& t : basic_.never_split()) special_ids_.push_back(vocab_.find(t));
  }

  /// Loads `vocab.txt` and builds the tokenizer.
  static wordpiece_tokenizer from_file(const std::filesystem::path& vocab_txt, wordpiece_options options = {}) {
    return wordpiece_tokenizer(vocab::load(vocab_txt), std::move(options));
  }

  const vocab& get_vocab() const noexcept { return vocab_; }
  const wordpiece_options& options() const noexcept { return options_; }
  std::int32_t unk_id() const noexcept { return unk_id_; }
  std::int32_t cls_id() const noexcept { return cls_id_; }
  std::int32_t sep_id() const noexcept { return sep_id_; }
  std::int32_t pad_id() const noexcept { return pad_id_; }

  /// Token ids of `text` without special tokens (transformers `tokenizer(text, add_special_tokens=False)`), appended
  /// to `ids`; when `offsets` is given, the byte span of each token in `text` is appended there.
  /// Throws text_error on invalid UTF-8.
  void tokenize(std::string_view text, std::vector<std::int32_t>& ids,
                std::vector<token_span>* offsets = nullptr) const {
    sink s{this, &ids, offsets};
    basic_.run(text, s, local_scratch());
  }
  std::vector<std::int32_t> tokenize(std::string_view text) const {
    std::vector<std::int32_t> ids;
    tokenize(text, ids);
    return ids;
  }

  /// The words BasicTokenizer produces (normalised, before WordPiece). With `split_specials = false` it equals
  /// transformers' `BasicTokenizer(...).tokenize(text)` with no never_split; for tests and debugging.
  std::vector<std::string> basic_tokenize(std::string_view text, bool split_specials = false) const {
    struct collect {
      const wordpiece_tokenizer* self;
      std::vector<std::string>* out;
      void piece(const piece_view& p) { out->emplace_back(p.text()); }
      void special(std::size_t i, token_span) { out->push_back(self->basic_.never_split()[i]); }
    };
    std::vector<std::string> out;
    collect c{this, &out};
    basic_.run(text, c, local_scratch(), split_specials);
    return out;
  }

  /// Encodes one text: [CLS] a [SEP], truncated and padded as `opt` says.
  encoding encode(std::string_view a, const encode_options& opt = {}) const { return encode_impl(a, nullptr, opt); }
  /// Encodes a pair: [CLS] a [SEP] b [SEP], token_type_ids 0 then 1.
  encoding encode(std::string_view a, std::string_view b, const encode_options& opt = {}) const {
    return encode_impl(a, &b, opt);
  }

  /// Encodes many texts (pairs when `b` is not empty; then b.size() must equal a.size()) on `threads` threads
  /// (0: hardware concurrency). With padding::longest every encoding is padded to the longest of the batch.
  std::vector<encoding> encode_batch(std::span<const std::string_view> a, std::span<const std::string_view> b,
                                     const encode_options& opt = {}, unsigned threads = 0) const {
    LOOM_CHECK(b.empty() || b.size() == a.size(), "encode_batch: " + std::to_string(b.size()) +
                                                      " second texts for " + std::to_string(a.size()) + " first texts");
    std::vector<encoding> out(a.size());
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    // Below a few hundred short texts a thread costs more than it saves.
    threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(1, a.size() / 256)));
    auto work = [&](std::size_t lo, std::size_t hi) {
      for (std::size_t i = lo; i < hi; ++i) out[i] = b.empty() ? encode(a[i], opt) : encode(a[i], b[i], opt);
    };
    if (threads <= 1) {
      work(0, a.size());
    } else {
      std::vector<std::exception_ptr> errors(threads);
      {
        std::vector<std::jthread> pool;
        const std::size_t per = (a.size() + threads - 1) / threads;
        for (unsigned t = 0; t < threads; ++t) {
          const std::size_t lo = std::min(a.size(), t * per), hi = std::min(a.size(), lo + per);
          pool.emplace_back([&, t, lo, hi] {
            try {
              work(lo, hi);
            } catch (...) {
              errors[t] = std::current_exception();
            }
          });
        }
      }
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    }
    if (opt.pad == padding::longest) {
      std::size_t longest = 0;
      for (const auto& e : out) longest = std::max(longest, e.size());
      for (auto& e : out) pad_to(e, longest);
    }
    return out;
  }

 private:
  struct sink {
    const wordpiece_tokenizer* self;
    std::vector<std::int32_t>* ids;
    std::vector<token_span>* offsets;
    void piece(const piece_view& p) { self->wordpiece(p, *ids, offsets); }
    void special(std::size_t i, token_span span) {
      ids->push_back(self->special_ids_[i]);
      if (offsets) offsets->push_back(span);
    }
  };

  static basic_scratch& local_scratch() {
    thread_local basic_scratch scratch;
    return scratch;
  }

  /// transformers adds the five special tokens as never-split "added tokens"; those missing from the vocabulary
  /// are left out here (transformers would give them new ids past the vocabulary, which a BERT model cannot embed).
  static std::vector<std::string> special_list(const vocab& v, const wordpiece_options& o) {
    std::vector<std::string> out;
    for (const std::string* t : {&o.unk_token, &o.sep_token, &o.pad_token, &o.cls_token, &o.mask_token})
      if (!t->empty() && v.find(*t) >= 0 && std::find(out.begin(), out.end(), *t) == out.end()) out.push_back(*t);
    return out;
  }

  std::int32_t required(const std::string& token) const {
    const std::int32_t id = vocab_.find(token);
    if (id < 0) throw text_error(vocab_.source(), 0, 0, "special token '" + token + "' is not in the vocabulary");
    return id;
  }

  /// Greedy longest-match-first WordPiece of one basic word, as transformers' WordpieceTokenizer: pieces after the
  /// first are looked up as "##piece"; if some position matches nothing, the whole word is one [UNK].
  void wordpiece(const piece_view& p, std::vector<std::int32_t>& ids, std::vector<token_span>* offsets) const {
    const std::size_t n = p.size();
    if (n == 0) return;
    if (n > options_.max_input_chars_per_word) {
      push(ids, offsets, unk_id_, p.span(0, n));
      return;
    }
    const std::string_view text = p.text();
    const std::size_t max_bytes = vocab_.max_token_bytes();
    const std::size_t mark = ids.size();
    std::size_t start = 0;
    while (start < n) {
      // No vocabulary entry is longer than max_bytes, so start from the longest piece that could match.
      std::size_t end = n;
      while (end > start && p.pos(end) - p.pos(start) > max_bytes) --end;
      std::int32_t id = -1;
      for (; end > start; --end) {
        const std::string_view sub = text.substr(p.pos(start), p.pos(end) - p.pos(start));
        id = start == 0 ? vocab_.find(sub) : vocab_.find_continuation(sub);
        if (id >= 0) break;
      }
      if (id < 0) {
        ids.resize(mark);
        if (offsets) offsets->resize(mark);
        push(ids, offsets, unk_id_, p.span(0, n));
        return;
      }
      push(ids, offsets, id, p.span(start, end));
      start = end;
    }
  }

  static void push(std::vector<std::int32_t>& ids, std::vector<token_span>* offsets, std::int32_t id, token_span s) {
    ids.push_back(id);
    if (offsets) offsets->push_back(s);
  }

  encoding encode_impl(std::string_view a, const std::string_view* b, const encode_options& opt) const {
    std::vector<std::int32_t> ia, ib;
    std::vector<token_span> oa, ob;
    tokenize(a, ia, &oa);
    if (b) tokenize(*b, ib, &ob);
    const std::size_t specials = opt.add_special_tokens ? (b ? 3 : 2) : 0;
    const std::size_t total = ia.size() + ib.size() + specials;
    if (opt.truncate != truncation::none && total > opt.max_length) {
      LOOM_CHECK(opt.max_length >= specials, "max_length " + std::to_string(opt.max_length) +
                                                 " leaves no room for the " + std::to_string(specials) +
                                                 " special tokens");
      truncate(ia, oa, ib, ob, b != nullptr, total - opt.max_length, opt.truncate);
    }
    encoding e;
    const std::size_t len = ia.size() + ib.size() + specials;
    e.input_ids.reserve(std::max(len, opt.pad == padding::max_length ? opt.max_length : 0));
    auto add = [&](std::int32_t id, std::int32_t type, token_span s, std::int8_t seq) {
      e.input_ids.push_back(id);
      e.token_type_ids.push_back(type);
      e.attention_mask.push_back(1);
      e.offsets.push_back(s);
      e.sequence_ids.push_back(seq);
    };
    if (opt.add_special_tokens) add(cls_id_, 0, {}, -1);
    for (std::size_t i = 0; i < ia.size(); ++i) add(ia[i], 0, oa[i], 0);
    if (opt.add_special_tokens) add(sep_id_, 0, {}, -1);
    if (b) {
      for (std::size_t i = 0; i < ib.size(); ++i) add(ib[i], 1, ob[i], 1);
      if (opt.add_special_tokens) add(sep_id_, 1, {}, -1);
    }
    if (opt.pad == padding::max_length) pad_to(e, opt.max_length);
    return e;
  }

  /// Removes `n` tokens at the right end. Pairs under longest_first are cut as the Rust tokenizers library does
  /// (transformers 5's BertTokenizer; the slow Python tokenizer differs when both texts are cut to an odd budget).
  static void truncate(std::vector<std::int32_t>& ia, std::vector<token_span>& oa, std::vector<std::int32_t>& ib,
                       std::vector<token_span>& ob, bool pair, std::size_t n, truncation how) {
    auto cut = [](std::vector<std::int32_t>& ids, std::vector<token_span>& off, std::size_t k) {
      k = std::min(k, ids.size());
      ids.resize(ids.size() - k);
      off.resize(off.size() - k);
    };
    if (how == truncation::only_first || (how == truncation::longest_first && !pair)) {
      cut(ia, oa, n);
    } else if (how == truncation::longest_first) {
      // The shorter text keeps its length when the longer one can take the rest of the budget; otherwise each gets
      // half of it, the longer one (the second on ties) the odd token.
      const std::size_t la = ia.size(), lb = ib.size(), budget = la + lb - n;
      std::size_t keep_short = std::min(la, lb);
      std::size_t keep_long = keep_short > budget ? keep_short : std::max(keep_short, budget - keep_short);
      if (keep_short + keep_long > budget) {
        keep_short = budget / 2;
        keep_long = keep_short + budget % 2;
      }
      const bool a_longer = la > lb;
      cut(ia, oa, la - std::min(la, a_longer ? keep_long : keep_short));
      cut(ib, ob, lb - std::min(lb, a_longer ? keep_short : keep_long));
    } else if (how == truncation::only_second && pair) {
      cut(ib, ob, n);
    }
  }

  void pad_to(encoding& e, std::size_t length) const {
    while (e.input_ids.size() < length) {
      e.input_ids.push_back(pad_id_);
      e.token_type_ids.push_back(0);
      e.attention_mask.push_back(0);
      e.offsets.push_back({});
      e.sequence_ids.push_back(-1);
    }
  }

  vocab vocab_;
  wordpiece_options options_;
  basic_tokenizer basic_;
  std::vector<std::int32_t> special_ids_;  // vocabulary id of basic_.never_split()[i]
  std::int32_t unk_id_ = -1, cls_id_ = -1, sep_id_ = -1, pad_id_ = -1;
};

}  // namespace loom::io

// The tar codec and the JSON reader: what the Docker machine relies on when it moves files and
// reads the daemon's answers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sandboxio/codec/json.hpp"
#include "sandboxio/codec/tar.hpp"

namespace {

using sandboxio::FileType;
namespace tar = sandboxio::tar;
namespace json = sandboxio::json;

struct Read {
  std::vector<tar::Entry> entries;
  std::vector<std::string> contents;
};

Read read_all(const std::string& archive, std::size_t piece) {
  Read out;
  tar::Reader r;
  for (std::size_t i = 0; i < archive.size(); i += piece) {
    EXPECT_TRUE(r.feed(
        std::string_view(archive).substr(i, piece),
        [&](const tar::Entry& e) {
          out.entries.push_back(e);
          out.contents.emplace_back();
        },
        [&](std::string_view data) { out.contents.back().append(data); }));
  }
  r.feed_eof();
  EXPECT_FALSE(r.error()) << r.error()->detail;
  EXPECT_TRUE(r.finished());
  return out;
}

std::string archive_of(const std::vector<std::pair<tar::Entry, std::string>>& files) {
  std::string out;
  for (const auto& [e, content] : files) {
    out += tar::header(e).value();
    out += content;
    out += tar::padding(content.size());
  }
  return out + tar::end();
}

TEST(Tar, RoundTripsAtEverySplitSize) {
  tar::Entry dir;
  dir.name = "tmp/tree";
  dir.type = FileType::Directory;
  dir.mode = 0755;
  tar::Entry file;
  file.name = "tmp/tree/bytes.bin";
  std::string all(256, '\0');
  for (int i = 0; i < 256; ++i)
    all[static_cast<std::size_t>(i)] = static_cast<char>(i);
  file.size = all.size();
  file.mode = 0600;
  file.mtime = 1700000000;
  tar::Entry empty;
  empty.name = "tmp/tree/empty";
  const std::string archive = archive_of({{dir, ""}, {file, all}, {empty, ""}});
  EXPECT_EQ(archive.size() % 512, 0u);
  for (std::size_t piece : {1u, 7u, 511u, 512u, 513u, 4096u}) {
    const Read r = read_all(archive, piece);
    ASSERT_EQ(r.entries.size(), 3u) << "piece " << piece;
    EXPECT_EQ(r.entries[0].type, FileType::Directory);
    EXPECT_EQ(r.entries[1].name, "tmp/tree/bytes.bin");
    EXPECT_EQ(r.entries[1].mode, 0600u);
    EXPECT_EQ(r.entries[1].mtime, 1700000000);
    EXPECT_EQ(r.contents[1], all);
    EXPECT_EQ(r.entries[2].size, 0u);
  }
}

TEST(Tar, LongNamesAndLinksUsePaxHeaders) {
  tar::Entry e;
  e.name = std::string(180, 'd') + "/" + std::string(120, 'f');
  e.size = 3;
  tar::Entry link;
  link.name = "l";
  link.type = FileType::Symlink;
  link.link_target = "/" + std::string(150, 't');
  const Read r = read_all(archive_of({{e, "abc"}, {link, ""}}), 100);
  ASSERT_EQ(r.entries.size(), 2u);
  EXPECT_EQ(r.entries[0].name, e.name);
  EXPECT_EQ(r.contents[0], "abc");
  EXPECT_EQ(r.entries[1].type, FileType::Symlink);
  EXPECT_EQ(r.entries[1].link_target, link.link_target);
}

TEST(Tar, RefusesWhatItCannotWriteOrRead) {
  tar::Entry nul;
  nul.name = std::string("a\0b", 3);
  EXPECT_EQ(tar::header(nul).problem().code, sandboxio::errc::InvalidPath);

  tar::Entry e;
  e.name = "x";
  e.size = 10;
  std::string archive = tar::header(e).value() + "0123456789";  // cut: no padding, no end
  tar::Reader cut;
  EXPECT_TRUE(cut.feed(archive.substr(0, 515), {}, {}));
  cut.feed_eof();
  ASSERT_TRUE(cut.error());
  EXPECT_EQ(cut.error()->code, sandboxio::errc::RemoteProtocolViolation);

  std::string bad = tar::header(e).value();
  bad[0] ^= 1;  // checksum no longer matches
  tar::Reader r;
  EXPECT_FALSE(r.feed(bad, {}, {}));
  EXPECT_NE(r.error()->detail.find("checksum"), std::string::npos);
}

TEST(Json, ReadsTheShapesDockerSends) {
  auto doc =
      json::parse(R"({"Id":"abc","Running":false,"ExitCode":137,"Pid":0,"Warnings":[],"Big":1e300,)"
                  R"("State":{"Status":"running"},"Labels":{"a":"1"},"Neg":-5,"Null":null})");
  ASSERT_TRUE(doc) << doc.problem().detail;
  const json::Value& v = doc.value();
  EXPECT_EQ(v.string_at("Id"), "abc");
  EXPECT_EQ(v.bool_at("Running"), false);
  EXPECT_EQ(v.int_at("ExitCode"), 137);
  EXPECT_EQ(v.int_at("Neg"), -5);
  EXPECT_FALSE(v.int_at("Big"));
  EXPECT_TRUE(v.find("Null")->is_null());
  EXPECT_TRUE(v.find("Warnings")->is_array());
  EXPECT_EQ(v.find("State")->string_at("Status"), "running");
  EXPECT_EQ(v.string_at("Missing"), std::nullopt);
}

TEST(Json, BadInputIsACodedErrorNeverACrash) {
  for (const char* text : {"", "{", "{\"a\":}", "[1,2", "\"\\x\"", "nul", "{\"a\":1}x"}) {
    auto doc = json::parse(text);
    ASSERT_FALSE(doc) << text;
    EXPECT_EQ(doc.problem().code, sandboxio::errc::RemoteProtocolViolation) << text;
  }
  const std::string deep(200, '[');
  EXPECT_FALSE(json::parse(deep + std::string(200, ']')));
  json::ParseLimits small;
  small.max_bytes = 8;
  EXPECT_EQ(json::parse(R"({"a":"long text"})", small).problem().code,
            sandboxio::errc::MessageTooLarge);
}

}  // namespace

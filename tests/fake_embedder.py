"""A deterministic fake `/v1/embeddings` server on 127.0.0.1 for tests, benches and offline demos (stdlib only).

The real openai SDK talks to it: it answers base64 (what the SDK asks for by default) or plain floats. A
vector is a bag of concepts: each word (English, or a Chinese word of CONCEPTS) counts for its concept, so
the words of one group ("shrink", "resize", "缩小") land on the same dimensions and a paraphrase or a Chinese
question finds an English note. It is a stand-in that makes the pipeline testable, not a model: real quality
needs a real model (e.g. Ollama's bge-m3). `floats=True` answers floats even when asked for base64, as
Ollama does. `common` > 0 gives every text a share of one direction, as models such as e5 do: unrelated texts
then have cosines near 0.8, not near 0, and a query unlike every note still has a "best". A known query or
passage prefix ("query: ", "passage: ") is no word of the text, as a model trained with it reads it. Faults
for tests: `down` (503), `refuse` (404 as DeepSeek answers), `delay` seconds before each answer, `fail_after`
N requests (then 503: an embedder stopped mid-way).

    python tests/fake_embedder.py 8766     # then EMBED_BASE_URL=http://127.0.0.1:8766/v1 EMBED_MODEL=fake
"""

import base64
import functools
import hashlib
import json
import math
import re
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler

from fake_server import Loopback

DIMENSIONS = 1024

# Groups of words meaning one thing; the first word names the group. English words are matched after a plain
# suffix cut (files -> file), Chinese ones as substrings.
CONCEPTS = [
    ("file", "document", "文件", "档案"), ("directory", "folder", "目录", "文件夹"),
    ("display", "show", "print", "view", "显示", "查看", "打印"), ("list", "enumerate", "列出", "列表"),
    ("create", "make", "generate", "创建", "生成", "新建"), ("delete", "remove", "erase", "删除", "移除"),
    ("compress", "squeeze", "压缩"), ("decompress", "extract", "unpack", "unzip", "解压", "提取"),
    ("archive", "bundle", "tarball", "归档", "存档"), ("image", "picture", "photo", "图片", "图像", "照片"),
    ("resize", "scale", "shrink", "downsize", "调整大小", "缩放", "缩小"), ("download", "fetch", "retrieve", "下载", "获取"),
    ("upload", "push", "上传"), ("network", "internet", "网络"), ("connection", "link", "连接"),
    ("process", "task", "进程", "任务"), ("kill", "terminate", "end", "终止", "杀死", "结束"),
    ("search", "find", "look", "locate", "搜索", "查找", "寻找"), ("text", "string", "文本", "字符串"),
    ("convert", "transform", "turn", "转换", "变换"), ("user", "account", "用户", "账户"),
    ("password", "passphrase", "密码"), ("disk", "drive", "storage", "磁盘", "硬盘", "存储"),
    ("memory", "ram", "内存"), ("package", "software", "包", "软件"), ("install", "setup", "安装"),
    ("update", "upgrade", "refresh", "更新", "升级"), ("start", "launch", "begin", "启动", "开始"),
    ("stop", "halt", "停止"), ("run", "execute", "invoke", "运行", "执行"), ("edit", "modify", "change", "编辑",
    "修改", "更改"), ("copy", "duplicate", "clone", "复制", "拷贝"), ("move", "relocate", "移动"),
    ("server", "host", "服务器", "主机"), ("command", "instruction", "命令", "指令"),
    ("manage", "administer", "control", "管理", "控制"), ("information", "info", "details", "信息", "详情"),
    ("system", "os", "系统"), ("video", "movie", "film", "视频", "影片"), ("audio", "sound", "音频", "声音"),
    ("music", "song", "音乐", "歌曲"), ("web", "website", "网页", "网站"), ("browser", "浏览器"),
    ("email", "mail", "邮件", "电子邮件"), ("message", "note", "消息"), ("terminal", "console", "shell",
    "终端", "控制台"), ("window", "窗口"), ("screen", "monitor", "屏幕"), ("time", "clock", "时间"),
    ("date", "calendar", "日期"), ("size", "length", "大小", "尺寸"), ("count", "number", "计数", "数量"),
    ("sort", "order", "排序"), ("compare", "diff", "比较"), ("encrypt", "encipher", "加密"),
    ("decrypt", "decipher", "解密"), ("key", "密钥"), ("certificate", "cert", "证书"), ("secure", "safe",
    "安全"), ("permission", "access", "权限"), ("owner", "ownership", "所有者"), ("repository", "repo", "仓库"),
    ("commit", "提交"), ("branch", "分支"), ("container", "容器"), ("database", "db", "数据库"),
    ("table", "表"), ("query", "request", "查询", "请求"), ("port", "端口"), ("address", "地址"),
    ("interface", "接口"), ("device", "hardware", "设备", "硬件"), ("battery", "power", "电池", "电源"),
    ("keyboard", "键盘"), ("mouse", "鼠标"), ("color", "colour", "颜色"), ("font", "typeface", "字体"),
    ("language", "语言"), ("translate", "翻译"), ("page", "页面"), ("line", "row", "行"), ("word", "单词", "词"),
    ("character", "char", "字符"), ("first", "top", "head", "开头", "第一"), ("last", "bottom", "tail", "末尾",
    "最后"), ("output", "result", "输出", "结果"), ("input", "输入"), ("log", "journal", "日志"),
    ("error", "failure", "错误", "失败"), ("debug", "troubleshoot", "调试"), ("test", "check", "verify",
    "测试", "检查", "验证"), ("build", "compile", "构建", "编译"), ("code", "source", "代码", "源代码"),
    ("program", "application", "app", "程序", "应用"), ("library", "module", "库", "模块"),
    ("version", "release", "版本"), ("configuration", "config", "settings", "配置", "设置"),
    ("environment", "环境"), ("variable", "变量"), ("function", "函数"), ("option", "flag", "选项"),
    ("help", "manual", "帮助", "手册"), ("remote", "远程"), ("local", "本地"), ("share", "共享", "分享"),
    ("sync", "synchronize", "同步"), ("backup", "备份"), ("restore", "recover", "恢复"),
    ("mount", "挂载"), ("partition", "分区"), ("format", "格式"), ("random", "随机"), ("hash", "checksum",
    "digest", "哈希", "校验和"), ("schedule", "cron", "计划", "调度"), ("service", "daemon", "服务"),
    ("game", "play", "游戏"), ("chat", "talk", "聊天"), ("cloud", "云"), ("virtual", "虚拟"),
    ("machine", "computer", "机器", "计算机"), ("cpu", "processor", "处理器"), ("graph", "chart", "plot", "图表"),
    ("pdf", "PDF"), ("json", "JSON"), ("tool", "utility", "工具"), ("speed", "fast", "quick", "速度", "快速"),
]
_GROUP = {word.casefold(): group[0] for group in CONCEPTS for word in group}
_CHINESE = sorted((w for w in _GROUP if re.search("[\u4e00-\u9fff]", w)), key=len, reverse=True)
_WORD = re.compile(r"[a-z][a-z0-9]*")
_STOPWORDS = frozenset("a an and are as at be by do for from how i in is it my of on or the this to with".split())


def concepts(text: str) -> list:
    """The concepts (or plain words) a text holds, one entry per occurrence."""
    text = text.casefold()
    found = []
    for word in _WORD.findall(text):
        if word in _STOPWORDS:
            continue
        for form in (word, word[:-1] if word.endswith("s") else word, word[:-2] if word.endswith("es") else word,
                     word[:-3] if word.endswith("ing") else word, word[:-2] if word.endswith("ed") else word):
            if form in _GROUP:
                found.append(_GROUP[form])
                break
        else:
            found.append(word)
    for chinese in _CHINESE:  # longest first, each occurrence taken out so 调整大小 is not also 大小
        found += [_GROUP[chinese]] * text.count(chinese)
        text = text.replace(chinese, " ")
    return found


PREFIXES = ("query: ", "passage: ")


def embed(text: str, common: float = 0.0) -> list:
    """The unit vector of a text: the sum of its concepts' fixed random ±1 vectors, each log-damped by its
    count, plus `common` times a direction every text shares. Dense like a real model's, so that sign bits say
    as much about it."""
    text = next((text[len(p):] for p in PREFIXES if text.startswith(p)), text)
    counts = {"": common} if common else {}
    for concept in concepts(text):
        counts[concept] = counts.get(concept, 0) + 1
    vector = [0.0] * DIMENSIONS
    for concept, n in counts.items():
        weight = n if concept == "" else 1 + math.log(n)
        vector = list(map(lambda x, sign: x + weight * sign, vector, _direction(concept)))
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector] if any(vector) else [1.0 / math.sqrt(DIMENSIONS)] * DIMENSIONS


@functools.lru_cache(maxsize=100_000)
def _direction(concept: str) -> tuple:
    bits = int.from_bytes(hashlib.shake_128(concept.encode()).digest(DIMENSIONS // 8), "little")
    return tuple(1.0 if bits >> i & 1 else -1.0 for i in range(DIMENSIONS))


class FakeEmbedder(Loopback):
    def __init__(self, port: int = 0, down: bool = False, refuse: bool = False, delay: float = 0.0,
                 fail_after: int | None = None, floats: bool = False, common: float = 0.0):
        self.floats, self.common = floats, common  # answer floats whatever was asked, as Ollama does
        self.down, self.refuse, self.delay, self.fail_after = down, refuse, delay, fail_after
        self.requests: list[dict] = []  # every request that reached the embeddings route
        self.lock = threading.Lock()
        self.listen(_handler_for(self), port)

    def inputs(self) -> list:
        """Every text sent to be embedded, in order."""
        with self.lock:
            return [text for request in self.requests for text in request["input"]]

    def answer(self, request: dict) -> tuple:
        with self.lock:
            self.requests.append(request)
            failing = self.down or (self.fail_after is not None and len(self.requests) > self.fail_after)
        if self.refuse:
            return 404, {"error": {"message": "Not Found"}}
        if failing:
            return 503, {"error": {"message": "embedder unavailable"}}
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        request["input"] = texts
        data = []
        for i, text in enumerate(texts):
            vector = embed(text, self.common)
            if request.get("encoding_format") == "base64" and not self.floats:
                vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
            data.append({"object": "embedding", "index": i, "embedding": vector})
        return 200, {"object": "list", "data": data, "model": request.get("model"),
                     "usage": {"prompt_tokens": sum(len(t) // 4 for t in texts), "total_tokens": 0}}


def _handler_for(fake: FakeEmbedder):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            if not self.path.endswith("/embeddings"):
                return self._json(404, {"error": {"message": f"no route {self.path}"}})
            if fake.delay:
                time.sleep(fake.delay)  # a slow embedder: the client's timeout must cut it short
            self._json(*fake.answer(json.loads(body)))

        def _json(self, status: int, body: dict):
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up waiting

    return Handler


if __name__ == "__main__":
    with FakeEmbedder(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8766) as fake:
        print(f"fake embeddings server on {fake.base_url} (any model name); Ctrl+C stops", file=sys.stderr)
        try:
            fake.thread.join()
        except KeyboardInterrupt:
            pass

"""A loopback stub of two model APIs for tests: the Anthropic Messages API (every
`POST /v1/messages` gets a short streamed (server-sent events) or plain answer) and the
OpenAI Responses and Chat Completions APIs (every `POST /v1/responses` or
`/v1/chat/completions` gets a short streamed answer). It appends
what credentials each request carried to the file named by argv[1]."""
import http.server, json, sys, time
seen = open(sys.argv[1], 'a')
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        if self.headers.get('transfer-encoding', '').lower() == 'chunked':
            body = b''
            while True:
                size = int(self.rfile.readline().split(b';')[0].strip() or b'0', 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get('content-length', 0)))
        if self.headers.get('content-encoding', '') == 'zstd':
            body = b'{}'  # not decoded: the stub's answer does not depend on it
        seen.write(f"{self.path} key={self.headers.get('x-api-key')} auth={self.headers.get('authorization')}\n"); seen.flush()
        try: req = json.loads(body)
        except Exception: req = {}
        if self.path.startswith('/v1/responses'):
            return self.openai_responses(req)
        if self.path.startswith('/v1/chat/completions'):
            return self.chat_completions(req)
        if not self.path.startswith('/v1/messages') or 'count_tokens' in self.path:
            out = json.dumps({"input_tokens": 1}).encode()
            self.send_response(200); self.send_header('content-type','application/json'); self.send_header('content-length', str(len(out))); self.end_headers(); self.wfile.write(out); return
        model = req.get('model', 'claude')
        if not req.get('stream'):
            out = json.dumps({"id":"msg_1","type":"message","role":"assistant","model":model,"content":[{"type":"text","text":"stub answer"}],"stop_reason":"end_turn","stop_sequence":None,"usage":{"input_tokens":1,"output_tokens":2}}).encode()
            self.send_response(200); self.send_header('content-type','application/json'); self.send_header('content-length', str(len(out))); self.end_headers(); self.wfile.write(out); return
        self.send_response(200); self.send_header('content-type','text/event-stream'); self.send_header('cache-control','no-cache'); self.send_header('connection','close'); self.end_headers()
        def ev(name, data):
            self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()); self.wfile.flush()
        ev("message_start", {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":model,"content":[],"stop_reason":None,"stop_sequence":None,"usage":{"input_tokens":1,"output_tokens":1}}})
        ev("content_block_start", {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})
        for w in ["Hello ", "from ", "the ", "stub"]:
            ev("content_block_delta", {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":w}}); time.sleep(0.05)
        ev("content_block_stop", {"type":"content_block_stop","index":0})
        ev("message_delta", {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":None},"usage":{"output_tokens":4}})
        ev("message_stop", {"type":"message_stop"})
        self.close_connection = True
    def do_GET(self):
        if self.headers.get('upgrade', '').lower() == 'websocket':
            # No WebSocket transport here: the client falls back to HTTP.
            self.send_response(404); self.send_header('content-length', '0'); self.end_headers(); return
        seen.write(f"GET {self.path} auth={self.headers.get('authorization')}\n"); seen.flush()
        out = json.dumps({"object": "list", "data": [{"id": "gpt-stub", "object": "model"}], "models": []}).encode()
        self.send_response(200); self.send_header('content-type','application/json'); self.send_header('content-length', str(len(out))); self.end_headers(); self.wfile.write(out)
    def openai_responses(self, req):
        self.send_response(200); self.send_header('content-type','text/event-stream'); self.send_header('cache-control','no-cache'); self.send_header('connection','close'); self.end_headers()
        def ev(data):
            self.wfile.write(f"event: {data['type']}\ndata: {json.dumps(data)}\n\n".encode()); self.wfile.flush()
        ev({"type":"response.created","response":{"id":"resp_1"}})
        text = ""
        for w in ["Hello ", "from ", "the ", "stub"]:
            text += w
            ev({"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":w}); time.sleep(0.05)
        ev({"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":text,"annotations":[]}]}})
        ev({"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":1,"input_tokens_details":None,"output_tokens":4,"output_tokens_details":None,"total_tokens":5}}})
        self.close_connection = True
    def chat_completions(self, req):
        self.send_response(200); self.send_header('content-type','text/event-stream'); self.send_header('cache-control','no-cache'); self.send_header('connection','close'); self.end_headers()
        def chunk(delta, finish=None):
            data = {"id":"chatcmpl-1","object":"chat.completion.chunk","created":0,"model":req.get('model','m'),"choices":[{"index":0,"delta":delta,"finish_reason":finish}]}
            self.wfile.write(f"data: {json.dumps(data)}\n\n".encode()); self.wfile.flush()
        chunk({"role":"assistant","content":""})
        for w in ["Hello ", "from ", "the ", "stub"]:
            chunk({"content":w}); time.sleep(0.05)
        chunk({}, "stop")
        self.wfile.write(b"data: [DONE]\n\n"); self.wfile.flush()
        self.close_connection = True
    def log_message(self, *a): pass
server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)
# The port it got, for the test.
print(server.server_address[1], flush=True)
server.serve_forever()

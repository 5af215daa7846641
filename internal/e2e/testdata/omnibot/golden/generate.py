"""Generates the golden backend payloads of TestInboundOmnibotPayloads by running Omnibot's own
payload classes (lyft/omnibot: omnibot/services/slack/{message,base_message,slash_command,
interactive_component,parser}.py and omnibot/utils) over the test's requests.

Usage:
  GANTRY_OMNIBOT_GOLDEN_INPUTS=/tmp/g go test ./internal/e2e -run TestInboundOmnibotPayloads
  python3 generate.py <omnibot checkout> /tmp/g/inputs.json <this folder>
  python3 generate.py <omnibot checkout> services/chat/events/testdata/omnibot/inputs.json \
      services/chat/events/testdata/omnibot      (the reaction payload, TestDispatchReactionPayload)

Slack's answers (users.info, conversations.info, auth.test) are the fake workspace's, as the test
captured them; redis, statsd and the Slack client are stubbed, nothing else of Omnibot is."""
import importlib
import json
import logging as pylogging
import os
import shutil
import sys
import tempfile
import types

omnibot_root, inputs_path, out_dir = sys.argv[1:4]
with open(inputs_path) as f:
    inputs = json.load(f)
slack_answers = inputs["slack"]

tmp = tempfile.mkdtemp()
pkg = os.path.join(tmp, "omnibot")
os.makedirs(os.path.join(pkg, "services", "slack"))
os.makedirs(os.path.join(pkg, "utils"))
for rel in ["services/slack/message.py", "services/slack/base_message.py", "services/slack/slash_command.py",
            "services/slack/interactive_component.py", "services/slack/parser.py", "services/slack/reaction.py",
            "utils/__init__.py"]:
    shutil.copy(os.path.join(omnibot_root, "omnibot", rel), os.path.join(pkg, rel))
open(os.path.join(pkg, "__init__.py"), "w").close()
open(os.path.join(pkg, "services", "__init__.py"), "w").close()
with open(os.path.join(pkg, "logging.py"), "w") as f:
    f.write("import logging as _l\ndef getLogger(name):\n    return _l.getLogger(name)\n")
with open(os.path.join(pkg, "services", "stats.py"), "w") as f:
    f.write(
        "import contextlib\n"
        "class _S:\n"
        "    def timer(self, *a):\n        return contextlib.nullcontext()\n"
        "    def incr(self, *a):\n        pass\n"
        "def get_statsd_client():\n    return _S()\n")
with open(os.path.join(pkg, "services", "slack", "bot.py"), "w") as f:
    f.write("class Bot:\n    pass\n")
# omnibot.services.slack: get_user and get_channel as Omnibot's, answered from Slack's (the fake's)
# answers: the user or channel when ok, else {}.
with open(os.path.join(pkg, "services", "slack", "__init__.py"), "w") as f:
    f.write(
        "import json, os\n"
        "_A = json.load(open(os.environ['GOLDEN_INPUTS']))['slack']\n"
        "def get_user(bot, user_id):\n"
        "    a = _A.get('users.info?user=' + user_id, {'ok': False})\n"
        "    return a['user'] if a.get('ok') else {}\n"
        "def get_channel(bot, channel):\n"
        "    a = _A.get('conversations.info?channel=' + channel, {'ok': False})\n"
        "    return a['channel'] if a.get('ok') else {}\n")
os.environ["GOLDEN_INPUTS"] = os.path.abspath(inputs_path)
sys.path.insert(0, tmp)
pylogging.basicConfig(level=pylogging.CRITICAL)

from omnibot.services.slack.bot import Bot  # noqa: E402
from omnibot.services.slack.interactive_component import InteractiveComponent  # noqa: E402
from omnibot.services.slack.message import Message  # noqa: E402
from omnibot.services.slack.reaction import Reaction  # noqa: E402
from omnibot.services.slack.slash_command import SlashCommand  # noqa: E402

bot = Bot()
bot.name, bot.bot_id, bot.user_id = "pingbot", "A0PING001", slack_answers["auth.test?"]["user_id"]
bot.team = types.SimpleNamespace(name="acme", team_id="T0FAKE001")

for name, req in inputs["requests"].items():
    req = json.loads(json.dumps(req))
    if name.startswith("slash_command/"):
        req["omnibot_bot_id"] = bot.bot_id  # as omnibot/routes/api.py queues it
        payload = SlashCommand(bot, req, {}).payload
    elif name.startswith("interactive/"):
        if req.get("team") is None:  # api.py injects the team it found
            req["team"] = {"id": "T0FAKE001"}
        req["omnibot_bot_id"] = bot.bot_id
        payload = InteractiveComponent(bot, req, {}).payload
    elif name.startswith("reaction/"):
        r = Reaction(bot, req["event"], {})
        r.set_match("reaction", req["match"])  # as _process_reaction_message_handlers does
        payload = r.payload
    else:
        m = Message(bot, req["event"], {})
        m.set_match("regex", "help")  # the test's handler: match "help", match_type regex
        payload = m.payload
    with open(os.path.join(out_dir, name.replace("/", "__") + ".json"), "w") as f:
        json.dump(payload, f, indent=2, sort_keys=True)
        f.write("\n")
    print(name)

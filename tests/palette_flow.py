"""The command palette's theme change as a person does it, for tests that run it in a fresh interpreter:
source text to put before their script, or a whole script (after_theme_change). Each key waits for what it needs on screen (not a fixed pause),
so a loaded machine is slower, never wrong."""

CHANGE_THEME = '''
async def until(pilot, predicate, limit_s=60.0):
    for _ in range(int(limit_s / 0.05)):
        if predicate():
            return True
        await pilot.pause(0.05)
    return False


def palette_options(app):
    from textual.command import CommandList, CommandPalette
    if not isinstance(app.screen, CommandPalette):
        return []
    lists = app.screen.query(CommandList)
    if not lists:
        return []
    shown = lists.first()
    return [str(shown.get_option_at_index(i).prompt).lower() for i in range(shown.option_count)]


async def change_theme(app, pilot, name):
    """ctrl+p, "theme", enter, the theme's name, enter; the palette's screen class as it opened."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: type(app.screen).__name__ == "CommandPalette")
    opened = type(app.screen)
    await pilot.press(*"theme")
    await until(pilot, lambda: palette_options(app)[:1] and "theme" in palette_options(app)[0])
    await pilot.press("enter")
    await until(pilot, lambda: len(palette_options(app)) > 3)  # the themes, listed
    await pilot.press(*name)
    await until(pilot, lambda: palette_options(app)[:1] and name in palette_options(app)[0])
    await pilot.press("enter")
    await until(pilot, lambda: app.theme == name)
    return opened
'''


def after_theme_change(result: str, imports: str = "") -> str:
    """A script: the dashboard's app module (and `imports`) loaded before Textual, a small app whose theme
    is changed to nord through the palette, then `result` (an expression of `app` and `opened`, the
    palette's screen class) printed as JSON."""
    return CHANGE_THEME + f"""
import asyncio, json, sys
import gpumix.tui.app
{imports}
from textual.app import App
from textual.widgets import Static

class Small(App):
    def compose(self):
        yield Static("x")

async def main():
    app = Small()
    async with app.run_test(size=(80, 24)) as pilot:
        opened = await change_theme(app, pilot, "nord")
        return {result}

print(json.dumps(asyncio.run(main())))
"""

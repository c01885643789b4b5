"""The command palette's theme change as a person does it, for tests that run it in a fresh interpreter:
source text to put before their script. Each key waits for what it needs on screen (not a fixed pause),
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
